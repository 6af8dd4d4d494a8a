"""The attention kernels on a Hopper GPU against the float64 reference (skipped without CUDA): the Triton kernel and
the CUDA C++ one (FA3FP8_KERNEL=cuda: BF16, FP16 and FP8 at each head dim; windows at d64 run the Triton kernel)
through the same public functions.

Error rule of FlashAttention-3's tests: the kernel's max error against fp64 is at most twice PyTorch's own error
in the same precision, plus a small atol. Outputs are poisoned with NaN beforehand.
"""

import math

import pytest
import torch

import fa3fp8
from fa3fp8.reference import (
    attention_fp8_reference,
    attention_reference,
    attention_varlen_reference,
    quantize_qkv_reference,
)

from fa3fp8.testing import (
    assert_dense_calls_without_queries_or_keys,
    case_id,
    poison_cuda_cache,
    random_qkv,
    rmse,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(params=["triton", "cuda"])
def kernel(request, monkeypatch):
    """Which forward kernel the public functions launch."""
    monkeypatch.setenv("FA3FP8_KERNEL", request.param)
    return request.param

SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads, d, causal
    (2, 1000, 1000, 8, 2, 128, True),
    (2, 1000, 1000, 8, 2, 128, False),
    (1, 4096, 4096, 4, 4, 64, True),
    (3, 257, 257, 4, 1, 256, False),
    (3, 257, 257, 4, 1, 256, True),
    (1, 1, 777, 16, 2, 128, True),  # decode
    (2, 100, 1000, 8, 1, 128, True),  # chunked prefill: bottom-right alignment
    (2, 300, 120, 4, 4, 64, True),  # more queries than keys: fully masked first rows
    (1, 17, 33, 64, 8, 128, False),  # GQA 8:1, odd lengths
    (2, 1536, 1536, 2, 2, 256, True),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[case_id(*s) for s in SHAPES])
def test_dense_matches_fp64_reference(shape, dtype, kernel):
    batch, sq, sk, heads, kv_heads, d, causal = shape
    q, k, v = random_qkv(batch, sq, sk, heads, kv_heads, d, dtype, "cuda")
    poison_cuda_cache()
    out, lse = fa3fp8.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
    same_precision, _ = attention_reference(q, k, v, causal=causal, compute_dtype=dtype)
    assert torch.isfinite(out).all()
    torch_err = (same_precision.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    assert (lse.double() - ref_lse)[~masked].abs().max().item() <= 1e-3
    assert (out[ref.abs().sum(-1) == 0] == 0).all()  # rows that see no key are zeros


WINDOWED = [  # (dense shape, window_size): Mistral's 4096-key sliding window over a longer sequence, a window
    # narrower than a key tile, a chunk of queries after cached keys, a two-sided window without a causal mask
    ((1, 6000, 6000, 8, 2, 128, True), (4095, -1)),
    ((2, 1000, 1000, 4, 4, 64, True), (31, -1)),
    ((2, 300, 2000, 8, 1, 256, True), (700, -1)),
    ((2, 777, 777, 4, 2, 128, False), (100, 57)),
]


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("shape,window", WINDOWED, ids=[f"{case_id(*s)}-window{w[0]}_{w[1]}" for s, w in WINDOWED])
def test_window_matches_fp64_reference(shape, window, fp8, kernel):
    # causal windows at d128 / d256 run the CUDA kernel under FA3FP8_KERNEL=cuda (V's keys permuted), the rest the
    # Triton kernel (V in key order); a bundle in the other kernel's order is read through a reordered copy
    batch, sq, sk, heads, kv_heads, d, causal = shape
    q, k, v = random_qkv(batch, sq, sk, heads, kv_heads, d, torch.bfloat16, "cuda")
    poison_cuda_cache()
    out, lse = fa3fp8.flash_attn_func(q, k, v, causal=causal, fp8=fp8, return_lse=True, window_size=window)
    ref, ref_lse = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64, window_size=window)
    assert torch.isfinite(out).all()
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    if fp8:
        qkv = fa3fp8.quantize_qkv(q, k, v, permute_v=True) if kernel == "cuda" else fa3fp8.quantize_qkv(q, k, v)
        ref8, lse8 = attention_fp8_reference(qkv, causal=causal, window_size=window)
        fp8_err = rmse(ref8, ref.reshape(ref8.shape))
        assert rmse(out, ref) <= 1.1 * fp8_err
        lse8 = lse8.double().reshape(heads, batch, sq).transpose(0, 1)  # packed (H, B·S) to (B, H, S)
        assert (lse.double() - lse8)[~masked].abs().max().item() <= 2e-2
        bundle_out = fa3fp8.flash_attn_fp8_func(qkv, causal=causal, window_size=window)
        assert rmse(bundle_out.reshape(ref8.shape), ref8) <= 0.8 * fp8_err
        return
    same_precision, _ = attention_reference(
        q, k, v, causal=causal, compute_dtype=torch.bfloat16, window_size=window
    )
    torch_err = (same_precision.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3
    assert (lse.double() - ref_lse)[~masked].abs().max().item() <= 1e-3


VARLEN = [([1, 17, 300, 1024, 777], 8, 2, 128), ([2048, 5, 64], 4, 4, 64), ([129, 1000], 8, 1, 256)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lens,heads,kv_heads,d", VARLEN,
                         ids=[f"lens{'_'.join(map(str, v[0]))}-H{v[1]}-KV{v[2]}-D{v[3]}" for v in VARLEN])
def test_varlen_matches_fp64_reference(lens, heads, kv_heads, d, causal, kernel):
    gen = torch.Generator().manual_seed(len(lens) * d)
    lens_k = [n + int(torch.randint(0, 50, (1,), generator=gen)) for n in lens] if causal else lens
    cu_q = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens), heads, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lens_k), kv_heads, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    poison_cuda_cache()
    out, lse = fa3fp8.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lens), max(lens_k), causal=causal, return_lse=True
    )
    ref, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, causal=causal, compute_dtype=torch.float64)
    same, _ = attention_varlen_reference(q, k, v, cu_q, cu_k, causal=causal, compute_dtype=torch.bfloat16)
    assert torch.isfinite(out).all()
    assert (out.double() - ref).abs().max().item() <= 2 * (same.double() - ref).abs().max().item() + 1e-3
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-3


FP8_SHAPES = [  # shape, RMSE bound vs fp64 (FA3's 9.1e-3 at d >= 128; Hadamard spreads less at d = 64)
    ((2, 2048, 2048, 8, 8, 128, False), 9.1e-3),
    # FA3's figure is for non-causal attention; causal rows near the start average few keys. Over 8 draws on the
    # H200 this case measured 9.32e-3 with amax / 448 V scales and 9.38e-3 with the power-of-two ones, for both
    # kernels alike (kernels/NOTES.md, session 5)
    ((2, 2048, 2048, 8, 2, 128, True), 9.6e-3),
    ((1, 1500, 1500, 4, 4, 256, False), 9.1e-3),
    ((2, 700, 700, 8, 8, 64, True), 1.4e-2),
]
# Against per-tensor FP8 in the same kernel math (P in FP8 too) we measured 1.4x (d64) to 2.1x (d128, d256);
# FA3's 2.6x is not reached (kernels/NOTES.md). The bound still fails if the rotation or the scales break.
PER_TENSOR_GAIN = 1.3


FP8_DRAWS = 3  # one draw's RMSE swings by ~20% with where the rare outliers fall: bound the mean of fixed draws


@pytest.mark.parametrize("shape,bound", FP8_SHAPES, ids=[case_id(*s) + "-fp8" for s, _ in FP8_SHAPES])
def test_fp8_accuracy_on_fa3_distribution(shape, bound, kernel):
    """FA3 Table 3 method: RMSE vs fp64 on N(0,1) + N(0,100)·Bernoulli(0.001) entries, against per-tensor FP8."""
    batch, sq, sk, heads, kv_heads, d, causal = shape
    errors, per_tensor_errors = [], []
    for seed in range(FP8_DRAWS):
        q, k, v = random_qkv(batch, sq, sk, heads, kv_heads, d, torch.bfloat16, "cuda", seed=seed, outliers=True)
        poison_cuda_cache()
        qkv = fa3fp8.quantize_qkv(q, k, v)
        out = fa3fp8.flash_attn_fp8_func(qkv, causal=causal)
        assert torch.isfinite(out).all()
        ref, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
        errors.append(rmse(out, ref))
        packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
        per_tensor = quantize_qkv_reference(
            *packed, qkv.cu_seqlens_q, qkv.cu_seqlens_k, qkv.block_m, qkv.block_n, hadamard=False, per_tensor=True
        )
        per_tensor_out, _ = attention_fp8_reference(per_tensor, causal=causal)
        per_tensor_errors.append(rmse(per_tensor_out, ref.reshape(per_tensor_out.shape)))
        # the kernel computes the reference's FP8 math, P rounded against a running max (the CUDA kernel: in units
        # of the largest V scale), so the two differ by P's rounding alone and neither is the less accurate
        ref8, _ = attention_fp8_reference(qkv, causal=causal)
        fp8_err = rmse(ref8, ref.reshape(ref8.shape))
        assert rmse(out.reshape(ref8.shape), ref8) <= 0.8 * fp8_err
        assert errors[-1] <= 1.1 * fp8_err
    mean_error = sum(errors) / FP8_DRAWS
    assert mean_error <= bound, errors
    assert sum(per_tensor_errors) / FP8_DRAWS >= PER_TENSOR_GAIN * mean_error, (errors, per_tensor_errors)


def test_fp8_varlen_and_default_flag(kernel):
    lens = [1, 200, 129, 1000]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lens), 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = fa3fp8.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, fp8=True)
    ref, _ = attention_varlen_reference(q, k, v, cu, cu, causal=True, compute_dtype=torch.float64)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert rmse(out, ref) <= 1e-2


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_dense_calls_without_queries_or_keys(d, fp8, kernel):
    # through the GPU launchers of both kernels, every head dim
    assert_dense_calls_without_queries_or_keys("cuda", torch.bfloat16, d, fp8)


@pytest.mark.parametrize("d", [128, 256])
def test_fp8_on_a_kv_cache_quantized_in_parts_equals_quantize_qkv(d, kernel):
    # what a KV cache's FP8 mirror hands attention (worker.llm.quantized_kv): K/V quantized in two parts, the second
    # from a block boundary, copied into buffers with room for more blocks; the output must be the whole bundle's
    from fa3fp8.testing import differing_fields

    q, k, v = random_qkv(1, 300, 1000, 8, 2, d, torch.bfloat16, "cuda", seed=d)
    whole = fa3fp8.quantize_qkv(q, k, v)
    start = 3 * whole.block_n
    first, rest = fa3fp8.quantize_kv(k[:, :start], v[:, :start]), fa3fp8.quantize_kv(k[:, start:], v[:, start:])
    blocks, room = -(-1000 // whole.block_n), 12
    v8t = torch.zeros(*first.v8t.shape[:2], room * whole.block_n, dtype=first.v8t.dtype, device="cuda")
    k_scale, v_scale = (torch.zeros(2, room, device="cuda") for _ in range(2))
    v8t[..., :start] = first.v8t[..., :start]
    v8t[..., start : blocks * whole.block_n] = rest.v8t[..., : (blocks - 3) * whole.block_n]
    for buffer, a, b in ((k_scale, first.k_scale, rest.k_scale), (v_scale, first.v_scale, rest.v_scale)):
        buffer[:, :3], buffer[:, 3:blocks] = a[:, :3], b[:, : blocks - 3]
    offsets = torch.tensor([0, 1000], dtype=torch.int32, device="cuda")
    kv = fa3fp8.QuantizedKV(torch.cat([first.k8, rest.k8]), v8t, k_scale, v_scale, offsets,
                            torch.tensor([0, blocks], dtype=torch.int32, device="cuda"), 1000, whole.block_n, True,
                            whole.v_permuted)
    parts = fa3fp8.assemble_qkv(fa3fp8.quantize_q(q), kv)
    assert differing_fields(parts, whole) == []
    poison_cuda_cache()
    for causal in (False, True):
        torch.testing.assert_close(fa3fp8.flash_attn_fp8_func(parts, causal=causal),
                                   fa3fp8.flash_attn_fp8_func(whole, causal=causal), atol=0, rtol=0)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("which", ["q", "v"])
@pytest.mark.parametrize("layout", ["tokens-major", "heads-major"])
def test_quantize_kernel_matches_reference(d, which, layout):
    """Each program walks several tiles (one program per SM here), read in place from either layout."""
    from fa3fp8.configs import fp8_blocks
    from fa3fp8.fp8_layout import block_offsets
    from fa3fp8.quantize import quantize_blocks
    from fa3fp8.reference import quantize_reference

    lens = [5, 3000, 0, 129]
    cu = torch.tensor([0, 5, 3005, 3005, 3134], dtype=torch.int32, device="cuda")
    x = torch.randn(sum(lens), 4, d, device="cuda", dtype=torch.bfloat16) * 3
    if layout == "heads-major":
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    block = fp8_blocks(d)[0]
    hadamard, transpose = (True, False) if which == "q" else (False, True)
    data, scale, cu_blocks = quantize_blocks(
        x, cu, max(lens), block, hadamard, transpose, pow2_scale=transpose, programs_per_sm=1
    )
    ref_data, ref_scale = quantize_reference(x, cu, block, hadamard, transpose, pow2=transpose)
    assert torch.equal(cu_blocks, block_offsets(cu, x.shape[0], block)[0])
    used = int(cu_blocks[-1])  # tiles past the last sequence's are never read
    assert torch.allclose(scale[:, :used], ref_scale[:, :used], rtol=1e-5)
    if transpose:
        data, ref_data = data[..., : used * block], ref_data[..., : used * block]
    a, b = data.float(), ref_data.float()
    ulp = torch.exp2(torch.floor(torch.log2(torch.maximum(a.abs(), b.abs()).clamp_min(2**-6))) - 3)
    assert ((a - b).abs() <= ulp).all()
    assert (a != b).float().mean().item() < 0.01


@pytest.mark.parametrize("d", [64, 128, 256])
def test_one_launch_quantizes_as_the_parts_apart(d):
    """quantize_qkv's one launch (and quantize_kv's, without Q) against each part's own launch, bit for bit: several
    programs per (sequence, head) for each part's tiles, an empty sequence, GQA 4:1, Q heads-major."""
    from fa3fp8.configs import fp8_blocks
    from fa3fp8.quantize import quantize_blocks, quantize_qkv_blocks
    from fa3fp8.testing import same_quantized

    lens = [5, 3000, 0, 1029]
    cu = torch.tensor([0, 5, 3005, 3005, 4034], dtype=torch.int32, device="cuda")
    q = (torch.randn(8, sum(lens), d, device="cuda", dtype=torch.bfloat16) * 3).transpose(0, 1)
    k, v = (torch.randn(sum(lens), 2, d, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(2))
    block_m, block_n = fp8_blocks(d)
    apart = [
        quantize_blocks(q, cu, max(lens), block_m, True),
        quantize_blocks(k, cu, max(lens), block_n, True),
        quantize_blocks(v, cu, max(lens), block_n, False, transpose=True, permute=True, pow2_scale=True),
    ]
    together = quantize_qkv_blocks(q, k, v, cu, cu, max(lens), max(lens), block_m, block_n, True, True)
    kv_only = quantize_qkv_blocks(None, k, v, None, cu, None, max(lens), None, block_n, True, True)
    assert kv_only[0] is None
    for parts in (together, (apart[0], *kv_only[1:])):
        assert [name for name, a, b in zip("QKV", parts, apart) if not same_quantized(name == "V", a, b)] == []


def test_custom_op_compiles_with_torch_compile():
    q, k, v = random_qkv(1, 512, 512, 4, 2, 128, torch.bfloat16, "cuda")
    compiled = torch.compile(lambda a, b, c: fa3fp8.flash_attn_func(a, b, c, causal=True) * 2, fullgraph=True)
    expect = fa3fp8.flash_attn_func(q, k, v, causal=True) * 2
    assert torch.equal(compiled(q, k, v), expect)
    assert math.isfinite(expect.float().sum().item())
