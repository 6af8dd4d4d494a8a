"""The FP8 mirror of a cache layer (quantized_kv.py, through PreallocatedLayer.quantized_kv): after appends of
uneven sizes, crops and a reset it holds exactly what quantizing the whole cached K/V gives, in either V layout;
it quantizes only the blocks from the first incomplete one, grows by doubling, and fa3_fp8 sessions use it."""
import pytest
import torch

import fa3fp8
from fa3fp8.testing import differing_fields, key_permuted, random_qkv
from worker.llm.kv_cache import PreallocatedLayer
from worker.llm.quantized_kv import QuantizedKVMirror
from worker.llm.session import Session

HEADS, KV_HEADS, DIM = 4, 2, 64
BLOCK = 128  # fa3fp8's K/V quantization block at head dim 64 (reference path)


def append(layer, tokens, seed):
    """`tokens` new random bf16 states, through `update` as transformers hands them (batch, kv_heads, tokens, d)."""
    _, keys, values = random_qkv(1, 1, tokens, HEADS, KV_HEADS, DIM, torch.bfloat16, "cpu", seed=seed)
    layer.update(keys.transpose(1, 2), values.transpose(1, 2))


def mismatches(layer, v_permuted):
    """Fields in which the mirror's bundle differs from quantize_qkv of the whole cached K/V (in that V layout)."""
    q = random_qkv(1, 8, 1, HEADS, KV_HEADS, DIM, torch.bfloat16, "cpu", seed=99)[0]
    whole = fa3fp8.quantize_qkv(q, layer.keys.transpose(1, 2), layer.values.transpose(1, 2))
    mirrored = fa3fp8.assemble_qkv(fa3fp8.quantize_q(q), layer.quantized_kv(v_permuted))
    return differing_fields(mirrored, key_permuted(whole) if v_permuted else whole)


@pytest.mark.parametrize("v_permuted", [False, True], ids=["v-in-order", "v-key-permuted"])
def test_mirror_equals_quantizing_the_whole_cache_after_appends_crops_and_reset(v_permuted):
    # the first call's order (True: the CUDA kernel's) is kept by the later ones, which ask for the same
    layer = PreallocatedLayer(capacity=1024)
    seeds = iter(range(100))
    for tokens in (100, 156, 300, 1):  # 100, 256 (two full blocks), 556, 557
        append(layer, tokens, next(seeds))
        assert mismatches(layer, v_permuted) == []
    assert layer.quantized.length == 557
    # 357: into a complete block; 397: into the partial one; 100: three blocks back
    for crop, tokens in ((-200, 50), (-10, 3), (-300, 130)):
        layer.crop(crop)
        append(layer, tokens, next(seeds))
        assert mismatches(layer, v_permuted) == []
    assert layer.get_seq_length() == layer.quantized.length == 230
    layer.reset()
    append(layer, 40, next(seeds))
    assert mismatches(layer, v_permuted) == [] and layer.quantized.length == 40
    assert layer.quantized_kv(v_permuted=not v_permuted).v_permuted is v_permuted


def test_only_the_blocks_from_the_first_incomplete_one_are_quantized_again():
    layer = PreallocatedLayer(capacity=1024)
    append(layer, 300, seed=0)
    before = layer.quantized_kv().k8.clone()
    layer.key_buffer[0, :300].neg_()  # behind the mirror's back: only a crop may change cached keys
    append(layer, 10, seed=1)
    after = layer.quantized_kv().k8
    # the two complete blocks are kept; the partial third one (keys 256..299) is quantized again
    assert torch.equal(after[: 2 * BLOCK].view(torch.uint8), before[: 2 * BLOCK].view(torch.uint8))
    assert not torch.equal(after[2 * BLOCK : 300].view(torch.uint8), before[2 * BLOCK :].view(torch.uint8))


def test_buffers_grow_by_doubling_up_to_the_capacity():
    layer = PreallocatedLayer(capacity=1000)  # 8 blocks
    allocated = []
    for seed, tokens in enumerate((100, 156, 300, 1, 300)):  # 1, 2, 5, 5, 7 blocks in use
        append(layer, tokens, seed)
        layer.quantized_kv()
        allocated.append(layer.quantized.allocated_blocks)
    assert allocated == [1, 2, 5, 5, 8]


def test_bad_calls_are_refused():
    with pytest.raises(ValueError, match="capacity"):
        QuantizedKVMirror(capacity=0)
    layer = PreallocatedLayer(capacity=64)
    with pytest.raises(ValueError, match="prefill first"):
        layer.quantized_kv()
    append(layer, 20, seed=0)
    layer.quantized_kv()
    keys, values = layer.key_buffer[0, :10], layer.value_buffer[0, :10]
    with pytest.raises(ValueError, match="keys: 10 keys, fewer than the 20 quantized"):
        layer.quantized.update(keys, values)
    mirror = QuantizedKVMirror(capacity=8)
    with pytest.raises(ValueError, match="keys: 10 keys, past the mirror's capacity of 8"):
        mirror.update(keys, values)
    wide = PreallocatedLayer(capacity=64)
    _, keys, values = random_qkv(2, 1, 5, HEADS, KV_HEADS, DIM, torch.bfloat16, "cpu", seed=0)
    wide.update(keys.transpose(1, 2), values.transpose(1, 2))
    with pytest.raises(ValueError, match="batch 1"):
        wide.quantized_kv()


@pytest.mark.parametrize("impl", ["fa3_fp8", "fa3_bf16"])
def test_only_fp8_sessions_fill_a_mirror(load_tiny, text_ids, impl):
    session = Session(load_tiny(impl, prefill_chunk_tokens=48))
    session.prefill(text_ids + text_ids)
    lengths = [layer.quantized.length if layer.quantized else None for layer in session.cache.layers]
    assert lengths == ([session.length] * 2 if impl == "fa3_fp8" else [None, None])
