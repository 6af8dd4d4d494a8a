"""The decode kernels on a Hopper GPU against the float64 reference (skipped without CUDA).

Error rule of FlashAttention-3's tests: the kernel's max error against fp64 is at most twice PyTorch's own error
in the same precision, plus a small atol. Scratch and outputs are poisoned with NaN beforehand.
"""

import pytest
import torch

import fa3fp8
from fa3fp8.decode import decode_fwd
from fa3fp8.reference import attention_decode_reference
from fa3fp8.testing import poison_cuda_cache

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = {  # name -> batch, max_seqlen, heads, kv_heads, d, cache_seqlens (None: all), cache layout
    "llama8b-ragged-0-1": (4, 4097, 32, 8, 128, [0, 1, 4097, 2500], "dense"),
    "llama8b-32K": (2, 32768, 32, 8, 128, None, "dense"),
    "llama8b-128K": (1, 131072, 32, 8, 128, None, "dense"),
    "llama8b-B8-16K-head-major": (8, 16384, 32, 8, 128, [16384, 1, 9000, 0, 16000, 777, 12345, 64], "head-major"),
    "mqa-D256": (3, 1000, 16, 1, 256, [1000, 999, 3], "dense"),
    "mha-D64-sliced": (2, 3000, 8, 8, 64, [3000, 17], "sliced"),
    "gqa8-D128": (2, 2048, 64, 8, 128, [2048, 1500], "dense"),
}


def inputs(batch, max_seqlen, heads, kv_heads, d, lens, layout, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(dtype)

    q = draw(batch, heads, d)
    if layout == "dense":
        k, v = draw(batch, max_seqlen, kv_heads, d), draw(batch, max_seqlen, kv_heads, d)
    elif layout == "sliced":  # a slice of a preallocated (batch + 1, longer) cache
        k, v = (draw(batch + 1, max_seqlen + 500, kv_heads, d)[1:, 7 : max_seqlen + 7] for _ in range(2))
    else:  # transformers' (batch, kv_heads, seq, d) cache, seen as (batch, seq, kv_heads, d)
        k, v = (draw(batch, kv_heads, max_seqlen + 100, d)[:, :, :max_seqlen].transpose(1, 2) for _ in range(2))
    seqlens = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    return q, k, v, seqlens


def check(out, lse, q, k, v, seqlens, dtype, softmax_scale=None, window_size=(-1, -1)):
    ref, ref_lse = attention_decode_reference(
        q, k, v, seqlens, softmax_scale, compute_dtype=torch.float64, window_size=window_size
    )
    same, _ = attention_decode_reference(q, k, v, seqlens, softmax_scale, compute_dtype=dtype, window_size=window_size)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == q.shape[:2]
    assert torch.isfinite(out).all()
    torch_err = (same.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    assert (out[masked] == 0).all()
    if (~masked).any():
        assert (lse.double() - ref_lse)[~masked].abs().max().item() <= 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", CASES)
def test_decode_matches_fp64_reference(name, dtype):
    q, k, v, seqlens = inputs(*CASES[name], dtype)
    poison_cuda_cache()
    out, lse = fa3fp8.flash_attn_decode_func(q, k, v, seqlens, return_lse=True)
    check(out, lse, q, k, v, seqlens, dtype)


@pytest.mark.parametrize("name", ["llama8b-ragged-0-1", "llama8b-32K"])
def test_decode_with_a_sliding_window_matches_fp64_reference(name):
    # Mistral's 4096-key window: most splits of the cache hold no visible key
    q, k, v, seqlens = inputs(*CASES[name], torch.bfloat16)
    poison_cuda_cache()
    out, lse = fa3fp8.flash_attn_decode_func(q, k, v, seqlens, return_lse=True, window_size=(4095, -1))
    check(out, lse, q, k, v, seqlens, torch.bfloat16, window_size=(4095, -1))


@pytest.mark.parametrize("num_splits", [1, 7, 1000])
@pytest.mark.parametrize("block_n,num_warps,num_stages", [(32, 4, 4), (64, 8, 3), (128, 4, 2)])
def test_split_counts_and_tiles(num_splits, block_n, num_warps, num_stages):
    """Any split count (1000 is capped at one tile per split) and the tile configs the benchmark sweeps."""
    q, k, v, seqlens = inputs(3, 10000, 32, 8, 128, [10000, 4321, 1], "dense", torch.bfloat16, seed=1)
    poison_cuda_cache()
    out, lse = decode_fwd(q, k, v, seqlens, 0.1, num_splits=num_splits, block_n=block_n, num_warps=num_warps,
                          num_stages=num_stages)
    check(out, lse, q, k, v, seqlens, torch.bfloat16, softmax_scale=0.1)


def test_replays_in_a_cuda_graph():
    """No host synchronization: the call is captured once and replayed with new queries and cache lengths."""
    q, k, v, seqlens = inputs(4, 8192, 32, 8, 128, [8192, 100, 0, 5000], "head-major", torch.bfloat16, seed=2)
    fa3fp8.flash_attn_decode_func(q, k, v, seqlens)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = fa3fp8.flash_attn_decode_func(q, k, v, seqlens, return_lse=True)
    for step, lens in enumerate(([8192, 100, 0, 5000], [1, 8000, 4096, 2])):
        q.copy_(torch.randn_like(q))
        seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        eager, eager_lse = fa3fp8.flash_attn_decode_func(q, k, v, seqlens, return_lse=True)
        assert torch.equal(out, eager), step
        assert torch.equal(lse, eager_lse), step
