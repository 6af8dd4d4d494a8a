"""Helpers shared by fa3fp8's tests and benchmarks: readable case ids, fresh random inputs (FlashAttention-3's
FP8 test distribution too), bit-for-bit comparison of FP8 bundles and their V key order, poisoned CUDA memory,
error metrics, host enqueue time, dense calls on empty batches, Triton kernels compiled for sm_90 without a GPU."""

import dataclasses
import math
import time

import torch

from .fp8_layout import permute_v_keys


def case_id(batch, seqlen_q, seqlen_k, heads, kv_heads, d, causal, dtype=None) -> str:
    """Readable parametrize id, e.g. B2-Sq1000-Sk1000-H8-KV2-D128-causal-bf16."""
    name = f"B{batch}-Sq{seqlen_q}-Sk{seqlen_k}-H{heads}-KV{kv_heads}-D{d}-{'causal' if causal else 'full'}"
    return name + (f"-{str(dtype).removeprefix('torch.')}" if dtype is not None else "")


def random_qkv(batch, seqlen_q, seqlen_k, heads, kv_heads, d, dtype, device, seed=None, outliers=False):
    """Fresh q (B, Sq, H, D), k, v (B, Sk, Hkv, D); with `outliers`, FlashAttention-3's FP8 test distribution
    N(0, 1) + N(0, 100) · Bernoulli(0.001)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed if seed is not None else torch.seed() % 2**31)

    def draw(*shape):
        x = torch.randn(*shape, generator=gen, device=device)
        if outliers:
            spikes = torch.rand(*shape, generator=gen, device=device) < 1e-3
            x = x + spikes * 10.0 * torch.randn(*shape, generator=gen, device=device)
        return x.to(dtype)

    return draw(batch, seqlen_q, heads, d), draw(batch, seqlen_k, kv_heads, d), draw(batch, seqlen_k, kv_heads, d)


def _in_use(bundle, name: str):
    """A bundle's field, cut to the tiles in use for V and the scales (the entries past cu_blocks[-1] are unset)."""
    value = getattr(bundle, name)
    if name == "q_scale":
        return value[:, : int(bundle.cu_blocks_q[-1])]
    if name in ("k_scale", "v_scale"):
        return value[:, : int(bundle.cu_blocks_k[-1])]
    if name == "v8t":
        return value[..., : int(bundle.cu_blocks_k[-1]) * bundle.block_n]
    return value


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (a.shape == b.shape and a.dtype == b.dtype
                and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
    return a == b


def differing_fields(a, b) -> list[str]:
    """The fields in which two FP8 bundles of one kind (QuantizedQKV, QuantizedQ or QuantizedKV) differ: tensors bit
    for bit over the tiles in use, the rest by value. Empty when they are the same bundle."""
    return [f.name for f in dataclasses.fields(a) if not _same(_in_use(a, f.name), _in_use(b, f.name))]


def same_quantized(transposed: bool, a, b) -> bool:
    """Two quantizer outputs of one part (data, scales, tile offsets; `quantize.quantize_blocks`'), bit for bit over
    the tiles in use: scales past the last tile offset are unset, and so are, `transposed` (V's), the data's columns
    past its last tile."""
    (data_a, scale_a, tiles_a), (data_b, scale_b, tiles_b) = a, b
    used = int(tiles_a[-1])
    if transposed:  # (heads, d, n_blocks x block) against (heads, n_blocks) scales
        columns = used * (data_a.shape[-1] // scale_a.shape[-1])
        data_a, data_b = data_a[..., :columns], data_b[..., :columns]
    return torch.equal(tiles_a, tiles_b) and _same(scale_a[:, :used], scale_b[:, :used]) and _same(data_a, data_b)


def key_permuted(bundle):
    """A QuantizedQKV or QuantizedKV with V's keys in order, moved to the CUDA kernel's order (`v_permuted`)."""
    return dataclasses.replace(bundle, v8t=permute_v_keys(bundle.v8t), v_permuted=True)


def poison_cuda_cache(n_bytes: int = 1 << 28) -> None:
    """Fill freed blocks of the CUDA caching allocator with NaN so that unwritten outputs show up."""
    torch.empty(n_bytes // 4, device="cuda").fill_(math.nan)
    torch.cuda.synchronize()


def rmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Root mean square of x − ref."""
    return (x.double() - ref.double()).pow(2).mean().sqrt().item()


def host_ms(fn, calls: int = 30) -> float:
    """Milliseconds the host needs to enqueue one call of `fn` (no synchronization inside the loop): above the
    kernel time, the host is the bottleneck."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = (time.perf_counter() - start) / calls * 1e3
    torch.cuda.synchronize()
    return elapsed


def assert_dense_calls_without_queries_or_keys(device, dtype, d: int, fp8: bool) -> None:
    """flash_attn_func on a dense batch with no queries gives empty outputs; with no keys every row sees none:
    zeros and lse -inf, never NaN."""
    from . import flash_attn_func

    q, k, v = random_qkv(2, 0, 5, 4, 2, d, dtype, device)
    out, lse = flash_attn_func(q, k, v, fp8=fp8, return_lse=True)
    assert out.shape == (2, 0, 4, d) and lse.shape == (2, 4, 0)
    q, k, v = random_qkv(2, 3, 0, 4, 2, d, dtype, device)
    out, lse = flash_attn_func(q, k, v, causal=True, fp8=fp8, return_lse=True)
    assert out.shape == q.shape and (out == 0).all() and torch.isneginf(lse).all()


def compile_for_hopper(kernel, signature: dict, consts: dict, aligned=(), **options):
    """Triton `kernel` compiled for sm_90 without a GPU: its arguments are i32 unless `signature` types them or
    `consts` fixes them; `aligned` ones get the 16-byte divisibility a launch specializes on; `options` as
    triton.compile's (num_warps, num_stages)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    full = {name: "constexpr" if name in consts else "i32" for name in names}
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    source = ASTSource(kernel, {**full, **signature}, consts, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
