"""Runs fa3fp8's Triton kernels under TRITON_INTERPRET=1 on small shapes and prints their errors as JSON.

Started in a subprocess by test_attention.py, because the interpreter must be chosen before Triton kernels
are defined and must not leak into other tests. fp16 for the dtype-generic path (bf16 dots are wrong in the
interpreter).
"""

import dataclasses
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402

import fa3fp8  # noqa: E402
from fa3fp8.configs import fp8_blocks  # noqa: E402
from fa3fp8.fp8_layout import block_offsets, unpermute_v_keys  # noqa: E402
from fa3fp8.quantize import quantize_blocks, quantize_qkv_blocks  # noqa: E402
from fa3fp8.reference import (  # noqa: E402
    attention_fp8_reference,
    attention_reference,
    attention_varlen_reference,
    quantize_reference,
)
from fa3fp8.testing import (  # noqa: E402
    case_id,
    differing_fields,
    key_permuted,
    random_qkv,
    rmse,
    same_quantized,
)

DENSE = [  # batch, seqlen_q, seqlen_k, heads, kv_heads, d, causal
    (2, 37, 70, 4, 2, 64, False),
    (2, 37, 70, 4, 2, 64, True),
    (1, 1, 45, 8, 1, 128, True),
    (1, 50, 20, 2, 2, 64, True),
    (1, 40, 40, 2, 2, 256, False),
]
VARLEN = [([5, 40, 33], [7, 40, 50], 4, 2, 64)]
# (dense shape, window_size): left edges inside a key tile and across tiles, a right edge without a causal mask,
# windows of one key, and rows that see no key (more queries than keys, a window right of every key)
WINDOWED = [
    ((2, 37, 70, 4, 2, 64, True), (5, -1)),
    ((2, 37, 70, 4, 2, 64, False), (16, 3)),
    ((1, 70, 70, 2, 1, 128, True), (40, -1)),
    ((1, 50, 20, 2, 2, 64, False), (0, 0)),
    ((1, 50, 20, 2, 2, 64, True), (3, -1)),
    ((1, 40, 40, 2, 2, 256, False), (-1, 7)),
]


def max_err(x, ref):
    return (x.double() - ref.double()).abs().max().item()


def lse_fields(lse, lse8):
    """The kernel's lse against the FP8 reference's on the same bundle, over the rows that see a key, and whether
    the same rows see none."""
    seen = torch.isfinite(lse8)
    return {"lse_err": max_err(lse[seen], lse8[seen]), "lse_inf_match": bool(torch.equal(torch.isinf(lse), ~seen))}


def packed_qkv(lens_q, lens_k, heads, kv_heads, d, seed):
    """Random fp16 packed q (sum(lens_q), heads, d), k, v (sum(lens_k), kv_heads, d) and their cu_seqlens."""
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), heads, d, generator=gen).half()
    k = torch.randn(sum(lens_k), kv_heads, d, generator=gen).half()
    v = torch.randn(sum(lens_k), kv_heads, d, generator=gen).half()
    return q, k, v, cu_q, cu_k


def dense_case(shape, window_size=(-1, -1)):
    batch, sq, sk, heads, kv_heads, d, causal = shape
    q, k, v = random_qkv(*shape[:6], torch.float16, "cpu", seed=sum(shape))
    out, lse = fa3fp8.flash_attn_func(q, k, v, causal=causal, return_lse=True, window_size=window_size)
    ref, ref_lse = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64, window_size=window_size)
    same, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float16, window_size=window_size)
    masked = torch.isinf(ref_lse)
    return {
        "err": max_err(out, ref), "torch_err": max_err(same, ref), "finite": bool(torch.isfinite(out).all()),
        "lse_err": max_err(lse[~masked], ref_lse[~masked]) if (~masked).any() else 0.0,
        "lse_inf_match": bool(torch.equal(torch.isinf(lse), masked)),
    }


def varlen_case(lens_q, lens_k, heads, kv_heads, d, causal, window_size=(-1, -1)):
    q, k, v, cu_q, cu_k = packed_qkv(lens_q, lens_k, heads, kv_heads, d, seed=7)
    out, lse = fa3fp8.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True, window_size=window_size
    )
    ref, ref_lse = attention_varlen_reference(
        q, k, v, cu_q, cu_k, causal=causal, compute_dtype=torch.float64, window_size=window_size
    )
    same, _ = attention_varlen_reference(
        q, k, v, cu_q, cu_k, causal=causal, compute_dtype=torch.float16, window_size=window_size
    )
    masked = torch.isinf(ref_lse)
    return {
        "err": max_err(out, ref), "torch_err": max_err(same, ref), "finite": bool(torch.isfinite(out).all()),
        "lse_err": max_err(lse[~masked], ref_lse[~masked]),
        "lse_inf_match": bool(torch.equal(torch.isinf(lse), masked)),
    }


def fp8_case(shape, window_size=(-1, -1)):
    causal = shape[-1]
    q, k, v = random_qkv(*shape[:6], torch.float16, "cpu", seed=sum(shape) + 1)
    qkv = fa3fp8.quantize_qkv(q, k, v)
    out, lse = fa3fp8.flash_attn_fp8_func(qkv, causal=causal, window_size=window_size, return_lse=True)
    ref8, lse8 = attention_fp8_reference(qkv, causal=causal, window_size=window_size)
    exact, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64, window_size=window_size)
    lse8 = lse8.reshape(lse.shape[1], lse.shape[0], lse.shape[2]).transpose(0, 1)  # packed (H, B·S) to (B, H, S)
    return {
        "kernel_vs_fp8_ref": rmse(out.reshape(ref8.shape), ref8), **lse_fields(lse, lse8),
        "fp8_ref_vs_exact": rmse(ref8, exact.reshape(ref8.shape)),
        "finite": bool(torch.isfinite(out).all()),
        "masked_rows_zero": bool((out.reshape(ref8.shape)[exact.reshape(ref8.shape).abs().sum(-1) == 0] == 0).all()),
    }


def fp8_window_permuted_case():
    """A windowed call on a bundle whose V is key-permuted (for the CUDA kernel) runs the Triton kernel on a reordered
    copy of V: bit for bit the output of the bundle quantized in key order."""
    q, k, v = random_qkv(1, 70, 70, 2, 1, 64, torch.float16, "cpu", seed=4)
    permuted, in_order = (fa3fp8.quantize_qkv(q, k, v, permute_v=order) for order in (True, False))
    outs = [fa3fp8.flash_attn_fp8_func(b, causal=True, window_size=(9, -1)) for b in (permuted, in_order)]
    return {"max_diff": max_err(*outs)}


def fp8_varlen_case(lens_q, lens_k, heads, kv_heads, d):
    q, k, v, cu_q, cu_k = packed_qkv(lens_q, lens_k, heads, kv_heads, d, seed=9)
    qkv = fa3fp8.quantize_qkv(q, k, v, True, cu_q, cu_k, max(lens_q), max(lens_k))
    out, lse = fa3fp8.flash_attn_fp8_func(qkv, causal=True, return_lse=True)
    ref8, lse8 = attention_fp8_reference(qkv, causal=True)
    exact, _ = attention_varlen_reference(q, k, v, cu_q, cu_k, causal=True, compute_dtype=torch.float64)
    return {
        "kernel_vs_fp8_ref": rmse(out, ref8), "fp8_ref_vs_exact": rmse(ref8, exact), **lse_fields(lse, lse8),
        "finite": bool(torch.isfinite(out).all()),
        "masked_rows_zero": bool((out[exact.abs().sum(-1) == 0] == 0).all()),
    }


def quantize_case(d, hadamard, transpose, permute=False, heads_major=False):
    """quantize_blocks against the reference (an empty sequence among them); `heads_major`: x is a (heads, tokens,
    d) tensor seen as (tokens, heads, d), read in place. Transposed (V's), the tile offsets go into a tensor given
    (as K's are), poisoned first."""
    cu = torch.tensor([0, 5, 5, 70, 103], dtype=torch.int32)
    x = (torch.randn(103, 3, d, generator=torch.Generator().manual_seed(d)) * 4).half()
    if heads_major:
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    block = fp8_blocks(d)[1]
    given = torch.full_like(cu, -7) if transpose else None
    data, scale, cu_blocks = quantize_blocks(x, cu, 65, block, hadamard, transpose, permute, pow2_scale=transpose,
                                             cu_blocks=given)
    ref_data, ref_scale = quantize_reference(x, cu, block, hadamard, transpose, pow2=transpose)
    used = int(cu_blocks[-1])
    if permute:
        data = unpermute_v_keys(data)
    if transpose:
        data, ref_data = data[..., : used * block], ref_data[..., : used * block]
    a, b = data.float(), ref_data.float()
    ulp = torch.exp2(torch.floor(torch.log2(torch.maximum(a.abs(), b.abs()).clamp_min(2**-6))) - 3)
    return {
        "scale_rel_err": ((scale[:, :used] - ref_scale[:, :used]).abs() / ref_scale[:, :used]).max().item(),
        "max_ulps": ((a - b).abs() / ulp).max().item(),
        "mismatch_fraction": (a != b).float().mean().item(),
        "tile_offsets_match": bool(torch.equal(cu_blocks, block_offsets(cu, x.shape[0], block)[0])),
        "tile_offsets_where_given": given is None or cu_blocks is given,
    }


def one_launch_quantize_case(d, hadamard, permute_v):
    """quantize_qkv_blocks (Q, K and V in one launch; and K and V alone) against quantize_blocks part by part, on
    packed sequences with an empty one among them, Q heads-major: the outputs that differ (data, scales and tile
    offsets over the tiles in use)."""
    q, k, v, cu_q, cu_k = packed_qkv([5, 0, 70, 33], [9, 3, 40, 64], 4, 2, d, seed=d + 1)
    q = q.transpose(0, 1).contiguous().transpose(0, 1)
    block_m, block_n = fp8_blocks(d)
    apart = [
        quantize_blocks(q, cu_q, 70, block_m, hadamard),
        quantize_blocks(k, cu_k, 64, block_n, hadamard),
        quantize_blocks(v, cu_k, 64, block_n, False, transpose=True, permute=permute_v, pow2_scale=True),
    ]

    def differing(parts):
        return [name for name, a, b in zip("QKV", parts, apart) if not same_quantized(name == "V", a, b)]

    together = quantize_qkv_blocks(q, k, v, cu_q, cu_k, 70, 64, block_m, block_n, hadamard, permute_v)
    kv_only = quantize_qkv_blocks(None, k, v, None, cu_k, None, 64, None, block_n, hadamard, permute_v)
    return {"qkv": differing(together), "kv": differing((apart[0], *kv_only[1:])), "no_q": kv_only[0] is None}


def split_quantize_case(d, permute_v):
    """quantize_q, quantize_kv and assemble_qkv against quantize_qkv (dense and packed), and K/V quantized from a
    block boundary on against those blocks of the whole sequence: the fields that differ in each."""
    q, k, v = random_qkv(2, 37, 70, 4, 2, d, torch.float16, "cpu", seed=d)
    dense = fa3fp8.assemble_qkv(fa3fp8.quantize_q(q), fa3fp8.quantize_kv(k, v, permute_v=permute_v))
    pq, pk, pv, cu_q, cu_k = packed_qkv([5, 40, 33], [7, 40, 50], 4, 2, d, seed=d)
    packed = fa3fp8.assemble_qkv(
        fa3fp8.quantize_q(pq, True, cu_q, 40), fa3fp8.quantize_kv(pk, pv, True, cu_k, 50, permute_v=permute_v)
    )
    block_n = fp8_blocks(d)[1]
    whole = fa3fp8.quantize_kv(k[:1], v[:1], permute_v=permute_v)
    tail = fa3fp8.quantize_kv(k[:1, block_n:], v[:1, block_n:], permute_v=permute_v)  # a full block, a partial one
    whole_tail = dataclasses.replace(
        whole, k8=whole.k8[block_n:], v8t=whole.v8t[..., block_n:], k_scale=whole.k_scale[:, 1:],
        v_scale=whole.v_scale[:, 1:], cu_seqlens_k=tail.cu_seqlens_k, cu_blocks_k=tail.cu_blocks_k,
        max_seqlen_k=tail.max_seqlen_k,
    )
    expected_dense = fa3fp8.quantize_qkv(q, k, v)
    expected_packed = fa3fp8.quantize_qkv(pq, pk, pv, True, cu_q, cu_k, 40, 50)
    if permute_v:
        expected_dense, expected_packed = key_permuted(expected_dense), key_permuted(expected_packed)
    return {
        "dense": differing_fields(dense, expected_dense),
        "packed": differing_fields(packed, expected_packed),
        "suffix": differing_fields(tail, whole_tail),
        "blocks": [int(tail.cu_blocks_k[-1]), int(whole.cu_blocks_k[-1])],
    }


def main():
    results = {}
    for shape in DENSE:
        results["dense-" + case_id(*shape, torch.float16)] = dense_case(shape)
    for lens_q, lens_k, heads, kv_heads, d in VARLEN:
        for causal in (False, True):
            name = (f"varlen-lens{'_'.join(map(str, lens_q))}-H{heads}-KV{kv_heads}-D{d}-"
                    f"{'causal' if causal else 'full'}")
            results[name] = varlen_case(lens_q, lens_k, heads, kv_heads, d, causal)
    for shape in [(2, 37, 70, 4, 2, 64, False), (1, 65, 65, 2, 1, 128, True), (1, 50, 20, 2, 2, 64, True)]:
        results["fp8-" + case_id(*shape)] = fp8_case(shape)
    results["fp8-varlen-lens5_40_33-H4-KV2-D64-causal"] = fp8_varlen_case(*VARLEN[0])
    for shape, window in WINDOWED:
        name = f"{case_id(*shape)}-window{window[0]}_{window[1]}"
        results["dense-" + name] = dense_case(shape, window)
        results["fp8-" + name] = fp8_case(shape, window)
    results["varlen-lens5_40_33-H4-KV2-D64-causal-window6_-1"] = varlen_case(*VARLEN[0], True, (6, -1))
    results["fp8-window-key-permuted-bundle"] = fp8_window_permuted_case()
    for d in (64, 128):
        results[f"quantize-D{d}-hadamard"] = quantize_case(d, True, False)
        results[f"quantize-D{d}-v-transposed"] = quantize_case(d, False, True)
        results[f"quantize-D{d}-v-key-permuted"] = quantize_case(d, False, True, permute=True)
        results[f"quantize-D{d}-hadamard-heads-major"] = quantize_case(d, True, False, heads_major=True)
        results[f"quantize-D{d}-v-heads-major"] = quantize_case(d, False, True, permute=True, heads_major=True)
        for hadamard, permute_v in ((True, True), (False, False)):
            results[f"one-launch-quantize-D{d}-{'hadamard' if hadamard else 'plain'}"] = one_launch_quantize_case(
                d, hadamard, permute_v
            )
        for permute_v in (False, True):
            results[f"split-quantize-D{d}-{'v-key-permuted' if permute_v else 'v-in-order'}"] = split_quantize_case(
                d, permute_v
            )
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
