"""ops.py: input validation, the custom ops (fake kernels, torch.compile), the reference fallback on CPU and the
split quantization (quantize_q, quantize_kv, assemble_qkv) on it."""

import dataclasses

import pytest
import torch

import fa3fp8
from fa3fp8 import attention_sm90, env, ops
from fa3fp8.reference import attention_reference, attention_varlen_reference
from fa3fp8.testing import assert_dense_calls_without_queries_or_keys, differing_fields, key_permuted, random_qkv


def _qkv(**over):
    q, k, v = random_qkv(2, 16, 24, 4, 2, 64, torch.bfloat16, "cpu", seed=3)
    return {"q": q, "k": k, "v": v, **over}


BAD_DENSE = {
    "q-3d": (dict(q=torch.randn(16, 4, 64, dtype=torch.bfloat16)), "q must have shape"),
    "q-fp32": (dict(q=torch.randn(2, 16, 4, 64)), "q must be bfloat16 or float16"),
    "k-dtype-mismatch": (dict(k=torch.randn(2, 24, 2, 64, dtype=torch.float16)), "k must have q's dtype"),
    "head-dim-96": (dict(q=torch.randn(2, 16, 4, 96, dtype=torch.bfloat16)), "head dim q.shape\\[-1\\] must be one of"),
    "v-shape": (dict(v=torch.randn(2, 23, 2, 64, dtype=torch.bfloat16)), "v must have k's shape"),
    "kv-heads-3": (dict(k=torch.randn(2, 24, 3, 64, dtype=torch.bfloat16),
                        v=torch.randn(2, 24, 3, 64, dtype=torch.bfloat16)), "kv_heads"),
    "batch-mismatch": (dict(k=torch.randn(1, 24, 2, 64, dtype=torch.bfloat16),
                            v=torch.randn(1, 24, 2, 64, dtype=torch.bfloat16)), "batch"),
    "softmax-scale": (dict(softmax_scale=-1.0), "softmax_scale"),
    "softmax-scale-inf": (dict(softmax_scale=float("inf")), "softmax_scale must be a positive finite float"),
    "softmax-scale-nan": (dict(softmax_scale=float("nan")), "softmax_scale"),
    "softmax-scale-bool": (dict(softmax_scale=True), "softmax_scale"),
    "hadamard-without-fp8": (dict(hadamard=True), "hadamard applies to the FP8 path only"),
    "window-int": (dict(window_size=4), "window_size must be a pair"),
    "window-three": (dict(window_size=(4, 0, 1)), "window_size must be a pair"),
    "window-below-minus-one": (dict(window_size=(-2, 0)), "window_size must be a pair"),
    "window-float": (dict(window_size=(4.0, 0)), "window_size must be a pair"),
    "window-bool": (dict(window_size=(True, 0)), "window_size must be a pair"),
}


@pytest.mark.parametrize("name", BAD_DENSE)
def test_bad_dense_input_names_the_argument(name):
    over, message = BAD_DENSE[name]
    args = _qkv(**over)
    with pytest.raises(ValueError, match=message):
        fa3fp8.flash_attn_func(**args)


def _packed(cu_q, cu_k=None, max_q=8, max_k=8):
    q = torch.randn(12, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(12, 2, 64, dtype=torch.bfloat16)
    cu_k = cu_q if cu_k is None else cu_k
    return dict(q=q, k=k, v=k.clone(), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k)


BAD_VARLEN = {
    "non-monotone": (_packed(torch.tensor([0, 8, 4, 12], dtype=torch.int32)), "non-decreasing"),
    "int64": (_packed(torch.tensor([0, 4, 12])), "1-D int32"),
    "wrong-total": (_packed(torch.tensor([0, 4, 10], dtype=torch.int32)), "must equal the packed length 12"),
    "max-seqlen-too-small": (_packed(torch.tensor([0, 4, 12], dtype=torch.int32), max_q=5), "max_seqlen"),
    "length-mismatch": (_packed(torch.tensor([0, 4, 12], dtype=torch.int32), torch.tensor([0, 12], dtype=torch.int32)),
                        "same length"),
}


@pytest.mark.parametrize("name", BAD_VARLEN)
def test_bad_varlen_input_names_the_argument(name):
    args, message = BAD_VARLEN[name]
    with pytest.raises(ValueError, match=message):
        fa3fp8.flash_attn_varlen_func(**args)


def test_varlen_checks_unchanged_cu_seqlens_once(monkeypatch):
    """The checks on cu_seqlens' values (a host sync) run on a tensor's first call, and again only after an in-place
    write to it or for another max_seqlen; an inference tensor (no version counter) is checked on every call."""
    from fa3fp8 import ops

    syncs, facts = [], ops._offset_facts
    monkeypatch.setattr(ops, "_offset_facts", lambda cus: syncs.append(len(cus)) or facts(cus))
    monkeypatch.setattr(ops, "_checked_offsets", ops._CheckedOffsets())
    cu = torch.tensor([0, 4, 12], dtype=torch.int32)
    for _ in range(3):
        fa3fp8.flash_attn_varlen_func(**_packed(cu))
    assert syncs == [2]  # q's and k's offsets (the same tensor) in one sync, once
    fa3fp8.flash_attn_varlen_func(**_packed(cu, max_q=12))
    assert syncs == [2, 1]  # max_seqlen_q changed; k's entry still holds
    cu[1] = 4
    fa3fp8.flash_attn_varlen_func(**_packed(cu))
    assert syncs == [2, 1, 2]
    cu[-1] = 11
    with pytest.raises(ValueError, match="must equal the packed length 12"):
        fa3fp8.flash_attn_varlen_func(**_packed(cu))
    with torch.inference_mode():
        frozen = torch.tensor([0, 4, 12], dtype=torch.int32)
        fa3fp8.flash_attn_varlen_func(**_packed(frozen))
        fa3fp8.flash_attn_varlen_func(**_packed(frozen))
    assert syncs[-2:] == [2, 2]


def _bf16(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def _parts(q_shape=(1, 16, 4, 64), k_shape=(1, 40, 2, 64), q_hadamard=True):
    return fa3fp8.quantize_q(_bf16(*q_shape), q_hadamard), fa3fp8.quantize_kv(_bf16(*k_shape), _bf16(*k_shape))


_CU = torch.tensor([0, 4, 12], dtype=torch.int32)
BAD_SPLIT = {
    "q-3d": (lambda: fa3fp8.quantize_q(_bf16(16, 4, 64)), "q must have shape"),
    "q-head-dim-96": (lambda: fa3fp8.quantize_q(_bf16(1, 16, 4, 96)), "head dim q.shape\\[-1\\] must be one of"),
    "q-cu-int64": (lambda: fa3fp8.quantize_q(_bf16(12, 4, 64), True, _CU.long(), 8), "cu_seqlens_q must be a 1-D"),
    "q-max-seqlen": (lambda: fa3fp8.quantize_q(_bf16(12, 4, 64), True, _CU, 5), "max_seqlen for cu_seqlens_q is 5"),
    "k-fp32": (lambda: fa3fp8.quantize_kv(torch.randn(1, 8, 2, 64), torch.randn(1, 8, 2, 64)), "k must be bfloat16"),
    "v-dtype": (lambda: fa3fp8.quantize_kv(_bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64).half()), "v must have k's dtype"),
    "v-shape": (lambda: fa3fp8.quantize_kv(_bf16(1, 8, 2, 64), _bf16(1, 9, 2, 64)), "v must have k's shape"),
    "k-cu-total": (lambda: fa3fp8.quantize_kv(_bf16(10, 2, 64), _bf16(10, 2, 64), True, _CU, 8),
                   "cu_seqlens_k\\[-1\\] = 12 must equal the packed length 10"),
    "permute-v": (lambda: fa3fp8.quantize_kv(_bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64), permute_v="yes"), "permute_v"),
    "q-not-quantized": (lambda: fa3fp8.assemble_qkv(_bf16(1, 8, 4, 64), _parts()[1]), "q must be a QuantizedQ"),
    "kv-from-quantize-qkv": (
        lambda: fa3fp8.assemble_qkv(_parts()[0], fa3fp8.quantize_qkv(_bf16(1, 8, 4, 64), *[_bf16(1, 8, 2, 64)] * 2)),
        "kv must be a QuantizedKV",
    ),
    "hadamard-mismatch": (lambda: fa3fp8.assemble_qkv(*_parts(q_hadamard=False)), "kv.hadamard must equal q.hadamard"),
    "batch-mismatch": (lambda: fa3fp8.assemble_qkv(*_parts(q_shape=(2, 16, 4, 64))), "kv must hold q's 2 sequences"),
    "head-dim-mismatch": (lambda: fa3fp8.assemble_qkv(*_parts(q_shape=(1, 16, 4, 128))), "kv head dim must equal q's"),
    "kv-heads-3": (lambda: fa3fp8.assemble_qkv(*_parts(k_shape=(1, 40, 3, 64))), "kv_heads"),
    "block-n": (lambda: fa3fp8.assemble_qkv(_parts()[0], dataclasses.replace(_parts()[1], block_n=64)), "kv.block_n"),
}


@pytest.mark.parametrize("serves_windows", [False, True], ids=["windows-on-triton", "windows-on-cuda"])
def test_v_permuted_for_names_the_order_of_the_kernel_that_serves_the_mask(monkeypatch, serves_windows):
    # as on a Hopper GPU, where the CUDA kernel serves FP8 without a window (V key-permuted) and causal windows where
    # serves_windows; the Triton kernel reads V in order
    monkeypatch.setattr(ops, "_use_triton", lambda t: True)
    monkeypatch.setattr(env, "interpreting", lambda: False)
    monkeypatch.setattr(ops, "_cuda_serves_fp8", lambda t, block_m, block_n: True)
    monkeypatch.setattr(attention_sm90, "serves_windows", lambda d: serves_windows)
    k = _bf16(1, 8, 2, 128)
    assert fa3fp8.v_permuted_for(k) is True
    assert fa3fp8.v_permuted_for(k, causal=True, window_size=(4095, 4095)) is serves_windows
    assert fa3fp8.v_permuted_for(k, causal=False, window_size=(4095, 4095)) is False
    # a window wider than every call's keys still names its kernel; causal drops a right bound alone
    assert fa3fp8.v_permuted_for(k, causal=True, window_size=(1 << 40, -1)) is serves_windows
    assert fa3fp8.v_permuted_for(k, causal=True, window_size=(-1, 5)) is True


def test_v_permuted_for_is_quantize_kvs_choice_without_a_window():
    k = _bf16(1, 8, 2, 64)
    assert fa3fp8.v_permuted_for(k) == fa3fp8.quantize_kv(k, k).v_permuted
    assert fa3fp8.v_permuted_for(k, causal=True, window_size=(3, 0)) is False  # the reference reads either order


@pytest.mark.parametrize("call, message", [
    (lambda: fa3fp8.v_permuted_for([1.0]), "k must be a torch.Tensor"),
    (lambda: fa3fp8.v_permuted_for(_bf16(1, 8, 2, 96)), "head dim k.shape\\[-1\\] must be one of"),
    (lambda: fa3fp8.v_permuted_for(_bf16(1, 8, 2, 64), window_size=(3,)), "window_size must be a pair"),
], ids=["not-a-tensor", "head-dim-96", "window-not-a-pair"])
def test_bad_v_permuted_for_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("name", BAD_SPLIT)
def test_bad_split_quantization_input_names_the_argument(name):
    call, message = BAD_SPLIT[name]
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("hadamard, permute_v", [(True, False), (True, True), (False, False)],
                         ids=["v-in-order", "v-key-permuted", "no-hadamard"])
def test_split_quantization_equals_quantize_qkv_on_the_reference(hadamard, permute_v):
    q, k, v = random_qkv(2, 37, 300, 4, 2, 64, torch.bfloat16, "cpu", seed=4)
    expected = fa3fp8.quantize_qkv(q, k, v, hadamard=hadamard)
    got = fa3fp8.assemble_qkv(fa3fp8.quantize_q(q, hadamard), fa3fp8.quantize_kv(k, v, hadamard, permute_v=permute_v))
    assert differing_fields(got, key_permuted(expected) if permute_v else expected) == []
    if permute_v:  # the comparison sees V's key order
        assert differing_fields(got, expected) == ["v8t", "v_permuted"]
    assert fa3fp8.quantize_kv(k, v).v_permuted == expected.v_permuted  # by default, quantize_qkv's choice


def test_fp8_func_rejects_other_bundles():
    with pytest.raises(ValueError, match="qkv must be a QuantizedQKV"):
        fa3fp8.flash_attn_fp8_func(torch.zeros(1))


FORWARD_CALLS = {
    "dense": lambda q, k, v: fa3fp8.flash_attn_func(q, k, v, causal=True, return_lse=True),
    "dense-fp8": lambda q, k, v: fa3fp8.flash_attn_func(q, k, v, fp8=True, return_lse=True),
    "varlen": lambda q, k, v: fa3fp8.flash_attn_varlen_func(
        q[0], k[0], v[0], *[torch.tensor([0, n], dtype=torch.int32) for n in (q.shape[1], k.shape[1])],
        q.shape[1], k.shape[1], return_lse=True),
    "decode": lambda q, k, v: fa3fp8.flash_attn_decode_func(q[:, -1], k, v, return_lse=True),
}


@pytest.mark.parametrize("call", FORWARD_CALLS)
def test_a_backward_pass_through_the_outputs_raises(call):
    # the kernels' outputs are not connected to their inputs: a backward pass must fail, not leave gradients out
    q, k, v = (t.requires_grad_() for t in random_qkv(1, 6, 9, 4, 2, 64, torch.float16, "cpu", seed=1))
    for output in FORWARD_CALLS[call](q, k, v):
        assert output.requires_grad
        with pytest.raises(RuntimeError, match="fa3fp8 computes attention forward only"):
            output.float().sum().backward()
    with torch.no_grad():
        out, lse = FORWARD_CALLS[call](q, k, v)
    assert not out.requires_grad and not lse.requires_grad
    expected = FORWARD_CALLS[call](*(t.detach() for t in (q, k, v)))
    torch.testing.assert_close(out, expected[0].detach())


def test_softmax_scale_takes_any_real_number_type():
    numpy = pytest.importorskip("numpy")
    args = _qkv()
    expected = fa3fp8.flash_attn_func(**args, softmax_scale=0.25)
    torch.testing.assert_close(fa3fp8.flash_attn_func(**args, softmax_scale=numpy.float32(0.25)), expected)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cpu_falls_back_to_reference(causal):
    q, k, v = random_qkv(2, 20, 33, 4, 2, 128, torch.bfloat16, "cpu")
    out, lse = fa3fp8.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, causal=causal)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.shape == (2, 4, 20)
    torch.testing.assert_close(out, ref.to(torch.bfloat16))
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_windows_hide_keys_on_the_reference_path(fp8, causal):
    # a window narrower than the keys changes the output; one as wide as every sequence is no window at all
    q, k, v = random_qkv(2, 12, 20, 4, 2, 64, torch.bfloat16, "cpu", seed=11)
    narrow = fa3fp8.flash_attn_func(q, k, v, causal=causal, fp8=fp8, window_size=(3, 2))
    wide = fa3fp8.flash_attn_func(q, k, v, causal=causal, fp8=fp8, window_size=(19, 11))
    plain = fa3fp8.flash_attn_func(q, k, v, causal=causal, fp8=fp8)
    assert torch.equal(wide, plain)
    assert not torch.allclose(narrow, plain, atol=1e-2)
    if not fp8:
        ref, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64, window_size=(3, 2))
        torch.testing.assert_close(narrow.double(), ref, atol=2e-2, rtol=0)


def test_window_bounds_that_hide_no_key_are_dropped():
    from fa3fp8.ops import _window

    assert _window((-1, -1), False, 8, 8) == (-1, -1)
    assert _window((7, 7), False, 8, 8) == (-1, -1)  # query 7 reaches key 0, query 0 key 7
    assert _window((6, 6), False, 8, 8) == (6, 6)
    assert _window((6, 6), True, 8, 8) == (6, -1)  # causal: no key after the query anyway
    assert _window((3, 3), False, 4, 20) == (3, -1)  # the first of 4 queries stands at key 16, 3 before the last
    assert _window((3, 2), False, 4, 20) == (3, 2)
    assert _window([5, 0], False, 1, 3) == (-1, -1)


def test_dense_calls_share_their_cu_seqlens():
    # made once per (batch, seqlen, device): an arange on the GPU cost host time on every call
    q, k, v = random_qkv(2, 20, 33, 4, 2, 128, torch.bfloat16, "cpu")
    with torch.inference_mode():
        first = fa3fp8.quantize_qkv(q, k, v)
    second = fa3fp8.quantize_qkv(q, k, v)
    assert first.cu_seqlens_q is second.cu_seqlens_q and first.cu_seqlens_k is second.cu_seqlens_k
    assert not first.cu_seqlens_q.is_inference()  # made in inference mode, usable outside it
    assert first.cu_seqlens_q.tolist() == [0, 20, 40] and first.cu_seqlens_k.tolist() == [0, 33, 66]


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_dense_calls_without_queries_or_keys(fp8):
    assert_dense_calls_without_queries_or_keys("cpu", torch.float16, 64, fp8)


def test_cpu_varlen_and_fp8_paths_run():
    cu = torch.tensor([0, 7, 30], dtype=torch.int32)
    q, k, v = (torch.randn(30, 4, 64, dtype=torch.float16) for _ in range(3))
    out = fa3fp8.flash_attn_varlen_func(q, k, v, cu, cu, 23, 23, causal=True)
    ref, _ = attention_varlen_reference(q, k, v, cu, cu, causal=True)
    torch.testing.assert_close(out, ref.half())
    out8, lse8 = fa3fp8.flash_attn_varlen_func(q, k, v, cu, cu, 23, 23, causal=True, fp8=True, return_lse=True)
    assert out8.dtype == torch.float16 and lse8.shape == (4, 30)
    assert (out8.float() - ref).pow(2).mean().sqrt() < 0.05


def test_key_permuted_bundle_gives_the_same_attention_on_the_reference():
    # the CUDA kernel's V layout (v_permuted) through the public FP8 function: the reference reads it back in order
    q, k, v = random_qkv(1, 40, 70, 4, 2, 128, torch.bfloat16, "cpu", seed=5)
    qkv = fa3fp8.quantize_qkv(q, k, v)
    permuted = key_permuted(qkv)
    assert not torch.equal(permuted.v8t.float(), qkv.v8t.float())
    for causal in (False, True):
        torch.testing.assert_close(fa3fp8.flash_attn_fp8_func(permuted, causal=causal),
                                   fa3fp8.flash_attn_fp8_func(qkv, causal=causal), rtol=0, atol=0)


def test_custom_ops_pass_opcheck():
    q, k, v = (x.reshape(-1, *x.shape[2:]) for x in random_qkv(2, 8, 8, 2, 1, 64, torch.float16, "cpu"))
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    torch.library.opcheck(torch.ops.fa3fp8.attn_varlen.default, (q, k, v, cu, cu, 8, 8, 0.125, True, -1, -1))
    torch.library.opcheck(torch.ops.fa3fp8.attn_varlen.default, (q, k, v, cu, cu, 8, 8, 0.125, False, 3, 2))
    torch.library.opcheck(torch.ops.fa3fp8.quantize_qkv.default, (q, k, v, cu, cu, 8, 8, 32, 32, True, False))
    torch.library.opcheck(torch.ops.fa3fp8.quantize_qkv.default, (q, k, v, cu, cu, 8, 8, 32, 32, True, True))
    torch.library.opcheck(torch.ops.fa3fp8.quantize_q.default, (q, cu, 8, 32, True))
    for permute_v in (False, True):
        torch.library.opcheck(torch.ops.fa3fp8.quantize_kv.default, (k, v, cu, 8, 32, True, permute_v))


@pytest.mark.parametrize("window_size", [(-1, -1), (4, -1)], ids=["no-window", "window"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_torch_compile_traces_through_the_ops(fp8, window_size):
    """fullgraph: the ops' fake kernels give torch.compile the output shapes (opcheck cannot run FP8 on a CPU)."""
    q, k, v = random_qkv(1, 16, 16, 2, 2, 64, torch.bfloat16, "cpu")

    def attend(a, b, c):
        return fa3fp8.flash_attn_func(a, b, c, causal=True, fp8=fp8, window_size=window_size) * 2

    torch.testing.assert_close(torch.compile(attend, fullgraph=True)(q, k, v), attend(q, k, v))


def test_torch_compile_traces_through_the_split_quantization():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 64, torch.bfloat16, "cpu")

    def attend(a, b, c):
        qkv = fa3fp8.assemble_qkv(fa3fp8.quantize_q(a), fa3fp8.quantize_kv(b, c))
        return fa3fp8.flash_attn_fp8_func(qkv, causal=True)

    compiled = torch.compile(attend, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), fa3fp8.flash_attn_func(q, k, v, causal=True, fp8=True))
