"""Pure-PyTorch attention: the same math as the Triton kernels, including the exact FP8 quantization.

Serves as the correctness oracle in tests and as the fallback on CPUs and non-Hopper GPUs.
Layouts follow the kernels: dense `(batch, seqlen, heads, d)`, packed `(total, heads, d)` with cu_seqlens.
"""

import math

import torch

from .fp8_layout import E4M3_MAX, QuantizedQKV, block_offsets, pow2_scale, unpermute_v_keys
from .hadamard import rotate

# P is scaled by 2**P_SHIFT before its FP8 conversion so that e4m3's normal range is used (FA3's offset of 8).
P_SHIFT = 8
_CHUNK_ELEMENTS = 1 << 25
NO_WINDOW = (-1, -1)


def _bounds(cu_seqlens) -> list[tuple[int, int]]:
    cu = [int(x) for x in (cu_seqlens.tolist() if torch.is_tensor(cu_seqlens) else cu_seqlens)]
    return list(zip(cu[:-1], cu[1:]))


def visible_keys(rows, cols, seqlen_q, seqlen_k, causal, window_size=NO_WINDOW):
    """Which keys `cols` each query row of `rows` (broadcast against each other) sees, aligned bottom-right: query i
    stands at key position i + seqlen_k - seqlen_q; causal hides the keys after it, and a window (left, right; -1:
    unbounded) the keys more than `left` before it or more than `right` after it."""
    at = rows + (seqlen_k - seqlen_q)
    left, right = window_size
    visible = torch.ones(torch.broadcast_shapes(at.shape, cols.shape), dtype=torch.bool, device=cols.device)
    if causal:
        visible = visible & (cols <= at)
    if left >= 0:
        visible = visible & (cols >= at - left)
    if right >= 0:
        visible = visible & (cols <= at + right)
    return visible


def _attend(q, k, v, scale, causal, compute_dtype, quantize_p=False, window_size=NO_WINDOW):
    """One sequence: q (Sq, H, D), k/v (Sk, Hkv, D) -> out (Sq, H, D), lse (H, Sq), in compute_dtype; keys hidden as
    `visible_keys` says."""
    sq, heads, _ = q.shape
    sk, kv_heads, _ = k.shape
    group = heads // kv_heads
    qf = q.to(compute_dtype).transpose(0, 1)
    kf = k.to(compute_dtype).transpose(0, 1).repeat_interleave(group, 0)
    vf = v.to(compute_dtype).transpose(0, 1).repeat_interleave(group, 0)
    out = qf.new_zeros(heads, sq, v.shape[-1])
    lse = qf.new_full((heads, sq), -math.inf)
    if sk == 0:  # a sequence without keys: zeros, lse = -inf
        return out.transpose(0, 1), lse
    rows = max(1, _CHUNK_ELEMENTS // max(1, heads * sk))
    cols = torch.arange(sk, device=q.device)
    for r0 in range(0, sq, rows):
        r1 = min(sq, r0 + rows)
        s = qf[:, r0:r1] @ kf.transpose(-1, -2) * scale
        if causal or window_size != NO_WINDOW:
            row_ids = torch.arange(r0, r1, device=q.device)[:, None]
            s = s.masked_fill(~visible_keys(row_ids, cols[None, :], sq, sk, causal, window_size), -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)
        if quantize_p:
            shift = 2.0**P_SHIFT
            p = (p * shift).to(torch.float8_e4m3fn).to(compute_dtype) / shift
        out[:, r0:r1] = p @ vf / torch.where(denom == 0, torch.ones_like(denom), denom)
        lse[:, r0:r1] = (m + torch.log(denom)).squeeze(-1)
    return out.transpose(0, 1), lse


def attention_reference(q, k, v, softmax_scale=None, causal=False, compute_dtype=torch.float32,
                        window_size=NO_WINDOW):
    """Dense attention: q (B, Sq, H, D), k/v (B, Sk, Hkv, D) -> out (B, Sq, H, D), lse (B, H, Sq) in compute_dtype.

    Causal masks and windows (`visible_keys`) are aligned bottom-right; fully masked rows give zeros and lse = -inf.
    """
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    outs, lses = zip(*(_attend(q[b], k[b], v[b], scale, causal, compute_dtype, window_size=window_size)
                       for b in range(q.shape[0])))
    return torch.stack(outs), torch.stack(lses)


def attention_varlen_reference(
    q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None, causal=False, compute_dtype=torch.float32,
    window_size=NO_WINDOW,
):
    """Packed attention: q (Tq, H, D), k/v (Tk, Hkv, D) -> out (Tq, H, D), lse (H, Tq) in compute_dtype."""
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = q.new_zeros(q.shape, dtype=compute_dtype)
    lse = q.new_full((q.shape[1], q.shape[0]), -math.inf, dtype=compute_dtype)
    for (q0, q1), (k0, k1) in zip(_bounds(cu_seqlens_q), _bounds(cu_seqlens_k)):
        out[q0:q1], lse[:, q0:q1] = _attend(
            q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, compute_dtype, window_size=window_size
        )
    return out, lse


def attention_decode_reference(
    q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, compute_dtype=torch.float32, window_size=NO_WINDOW
):
    """Decode attention over a KV cache: q (B, H, D) is each sequence's newest token, k/v_cache (B, S, Hkv, D),
    cache_seqlens (B,) the number of valid keys per sequence (None: all S; clamped to [0, S]); a window's left
    bound hides the keys more than that many before the newest.

    Returns out (B, H, D) and lse (B, H) in compute_dtype; a sequence without keys gives zeros and lse = -inf.
    """
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    batch, heads, d = q.shape
    max_seqlen = k_cache.shape[1]
    lens = [max_seqlen] * batch if cache_seqlens is None else cache_seqlens.tolist()
    out = q.new_zeros((batch, heads, d), dtype=compute_dtype)
    lse = q.new_full((batch, heads), -math.inf, dtype=compute_dtype)
    for b, n in enumerate(lens):
        n = min(max(n, 0), max_seqlen)
        if n:
            o, l = _attend(q[b, None], k_cache[b, :n], v_cache[b, :n], scale, False, compute_dtype,
                           window_size=window_size)
            out[b], lse[b] = o[0], l[:, 0]
    return out, lse


def quantize_reference(x, cu_seqlens, block, hadamard, transpose=False, per_tensor=False, pow2=False):
    """FP8 quantization with one scale per (head, tile of `block` rows of one sequence), as the Triton kernel does.

    x (T, H, D) -> data e4m3 (T, H, D), or (H, D, n_blocks * block) tile by tile with `transpose` (see
    QuantizedQKV); scale fp32 (H, n_blocks): amax / 448, or with `pow2` the power of two `pow2_scale` (V's).
    `per_tensor` uses the whole tensor's amax for every tile instead (the plain FP8 baseline).
    """
    total, heads, d = x.shape
    xr = rotate(x) if hadamard else x.to(torch.float64)
    tensor_amax = xr.abs().amax().to(torch.float32).clamp_min(1e-12).expand(heads) if per_tensor and total else None
    offsets, n_blocks = block_offsets(torch.as_tensor(cu_seqlens, dtype=torch.int32), total, block)
    scale = torch.ones(heads, n_blocks, dtype=torch.float32, device=x.device)
    data = torch.zeros(total, heads, d, dtype=torch.float64, device=x.device)
    for b, (t0, t1) in enumerate(_bounds(cu_seqlens)):
        for i, r0 in enumerate(range(t0, t1, block)):
            tile = xr[r0 : min(t1, r0 + block)]
            amax = tensor_amax if per_tensor else tile.abs().amax(dim=(0, 2)).to(torch.float32).clamp_min(1e-12)
            tile_scale = pow2_scale(amax) if pow2 else amax / E4M3_MAX
            scale[:, int(offsets[b]) + i] = tile_scale
            inverse = 1.0 / tile_scale.double() if pow2 else E4M3_MAX / amax.double()
            data[r0 : r0 + tile.shape[0]] = tile * inverse[None, :, None]
    data8 = data.to(torch.float8_e4m3fn)
    if transpose:
        data8 = _to_tiles(data8, cu_seqlens, block, n_blocks)
    return data8, scale


def _tile_columns(cu_seqlens, block):
    """(token index, column in the tile-by-tile transposed layout) of every token."""
    offsets, _ = block_offsets(torch.as_tensor(cu_seqlens, dtype=torch.int32), 0, block)
    tokens, columns = [], []
    for b, (t0, t1) in enumerate(_bounds(cu_seqlens)):
        tokens += range(t0, t1)
        columns += range(int(offsets[b]) * block, int(offsets[b]) * block + t1 - t0)
    return torch.tensor(tokens, dtype=torch.long), torch.tensor(columns, dtype=torch.long)


def _to_tiles(data, cu_seqlens, block, n_blocks):
    heads, d = data.shape[1], data.shape[2]
    out = torch.zeros(heads, d, n_blocks * block, dtype=data.dtype, device=data.device)
    tokens, columns = _tile_columns(cu_seqlens, block)
    out[:, :, columns.to(data.device)] = data[tokens.to(data.device)].permute(1, 2, 0)
    return out


def dequantize(data8, scale, cu_seqlens, block, transposed=False):
    """Inverse of `quantize_reference` (without undoing the rotation): float64 (T, H, D)."""
    data = data8.to(torch.float64)
    if transposed:
        tokens, columns = _tile_columns(cu_seqlens, block)
        data = data.new_zeros(len(tokens), data.shape[0], data.shape[1]).index_copy(
            0, tokens.to(data.device), data[:, :, columns.to(data.device)].permute(2, 0, 1)
        )
    out = data.clone()
    offsets, _ = block_offsets(torch.as_tensor(cu_seqlens, dtype=torch.int32), data.shape[0], block)
    for b, (t0, t1) in enumerate(_bounds(cu_seqlens)):
        for i, r0 in enumerate(range(t0, t1, block)):
            r1 = min(t1, r0 + block)
            out[r0:r1] *= scale[:, int(offsets[b]) + i].double()[None, :, None]
    return out


def attention_fp8_reference(qkv: QuantizedQKV, softmax_scale=None, causal=False, quantize_p=True,
                            window_size=NO_WINDOW):
    """Attention on the dequantized bundle in float64, with P rounded to e4m3 like the kernel (against the final
    row max). Returns packed out (Tq, H, D) and lse (H, Tq)."""
    d = qkv.q8.shape[-1]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    q = dequantize(qkv.q8, qkv.q_scale, qkv.cu_seqlens_q, qkv.block_m)
    k = dequantize(qkv.k8, qkv.k_scale, qkv.cu_seqlens_k, qkv.block_n)
    v8t = unpermute_v_keys(qkv.v8t) if qkv.v_permuted else qkv.v8t
    v = dequantize(v8t, qkv.v_scale, qkv.cu_seqlens_k, qkv.block_n, transposed=True)
    out = q.new_zeros(q.shape)
    lse = q.new_full((q.shape[1], q.shape[0]), -math.inf)
    for (q0, q1), (k0, k1) in zip(_bounds(qkv.cu_seqlens_q), _bounds(qkv.cu_seqlens_k)):
        out[q0:q1], lse[:, q0:q1] = _attend(
            q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, torch.float64, quantize_p=quantize_p,
            window_size=window_size,
        )
    return out, lse


def quantize_kv_reference(k, v, cu_seqlens_k, block_n, hadamard=True, per_tensor=False):
    """K and V of a QuantizedQKV from packed k, v (Tk, Hkv, D), by `quantize_reference`: k8, v8t (transposed tile by
    tile, keys in order), k_scale, v_scale."""
    k8, k_scale = quantize_reference(k, cu_seqlens_k, block_n, hadamard, per_tensor=per_tensor)
    v8t, v_scale = quantize_reference(v, cu_seqlens_k, block_n, False, transpose=True, per_tensor=per_tensor, pow2=True)
    return k8, v8t, k_scale, v_scale


def quantize_qkv_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, block_m, block_n, hadamard=True, per_tensor=False):
    """The QuantizedQKV bundle of packed q (Tq, H, D), k, v (Tk, Hkv, D), built by `quantize_reference`."""
    cu_q = torch.as_tensor(cu_seqlens_q, dtype=torch.int32, device=q.device)
    cu_k = torch.as_tensor(cu_seqlens_k, dtype=torch.int32, device=q.device)
    q8, q_scale = quantize_reference(q, cu_q, block_m, hadamard, per_tensor=per_tensor)
    k8, v8t, k_scale, v_scale = quantize_kv_reference(k, v, cu_k, block_n, hadamard, per_tensor)
    lens_q, lens_k = cu_q.diff(), cu_k.diff()
    return QuantizedQKV(
        q8, k8, v8t, q_scale, k_scale, v_scale, cu_q, cu_k, block_offsets(cu_q, q.shape[0], block_m)[0],
        block_offsets(cu_k, k.shape[0], block_n)[0], int(lens_q.max()), int(lens_k.max()), block_m, block_n,
        hadamard, q.dtype, None,
    )
