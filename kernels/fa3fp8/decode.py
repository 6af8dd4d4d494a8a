"""Split-KV decode attention (flash-decoding) in Triton: one query token per sequence over a KV cache.

One query row per sequence cannot fill the GPU if one program walks the whole cache, so the cache length is cut
into chunks: each program takes one (sequence, KV head, chunk), loads the query heads that share the KV head
(GQA: K and V are read once for all of them), runs an online softmax over the chunk's key tiles and writes a
normalized partial output and its log-sum-exp to fp32 scratch. A second small kernel merges the chunks by their
LSEs. Plain strided pointer loads (no TMA), so the caches may be slices of a larger buffer and the kernels run
under TRITON_INTERPRET=1 too.
"""

import torch
import triton
import triton.language as tl

from .gpu import sm_count

LOG2E = 1.4426950408889634
LN2 = tl.constexpr(0.6931471805599453)
WAVES = 2  # programs per SM the split count aims for
MIN_GROUP_ROWS = 16  # tl.dot needs at least 16 rows: the query-head group is padded to this
MERGE_BLOCK_S = 32  # chunks merged per step of the merge kernel
INTERPRETER_SMS = 4  # stand-in SM count off the GPU: a few splits, so the interpreter tests cover merging
# head dim -> (keys per tile, warps, pipeline stages). The K/V tiles in flight take 70-75 KB of shared memory
# (sm_90 build, checked by test_decode.py), so two or three programs fit on one SM.
TILES = {64: (128, 4, 3), 128: (64, 4, 3), 256: (64, 4, 2)}


@triton.jit
def _decode_split(
    Q, K, V, SEQLENS, O_PART, LSE_PART,
    qk_scale, max_seqlen, chunk, num_splits, window_left,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kn, stride_kh, stride_kd,
    stride_vb, stride_vn, stride_vh, stride_vd,
    HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, HAS_WINDOW: tl.constexpr,
):
    """Keys [split * chunk, (split + 1) * chunk) of one (sequence, KV head): partial out and LSE (base 2);
    HAS_WINDOW: of the keys from window_left before the newest (the query's own) on, the splits covering the window."""
    split = tl.program_id(0)
    pid = tl.program_id(1)
    b = (pid // HKV).to(tl.int64)
    hk = (pid % HKV).to(tl.int64)
    if HAS_SEQLENS:
        seqlen = tl.minimum(tl.maximum(tl.load(SEQLENS + b), 0), max_seqlen)
    else:
        seqlen = max_seqlen
    start = split * chunk
    if HAS_WINDOW:
        start += tl.maximum(seqlen - 1 - window_left, 0)
    end = tl.minimum(start + chunk, seqlen)

    offs_h = tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    rows = hk * GROUP + offs_h
    row_ok = offs_h < GROUP
    q = tl.load(Q + b * stride_qb + rows[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)
    first = start.to(tl.int64)
    k_ptrs = (K + b * stride_kb + hk * stride_kh + first * stride_kn
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
    v_ptrs = (V + b * stride_vb + hk * stride_vh + first * stride_vn
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D], dtype=tl.float32)
    for n0 in tl.range(start, end, BLOCK_N):
        # every tile the loop runs holds at least one key, so m_new is finite
        valid = n0 + offs_n < end
        k = tl.load(k_ptrs, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs, mask=valid[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn

    # a chunk without keys (past this sequence's end) stores zeros and lse = -inf
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    part = ((b * HKV + hk) * GROUP + offs_h) * num_splits + split
    tl.store(O_PART + part[:, None] * D + offs_d[None, :], out, mask=row_ok[:, None])
    tl.store(LSE_PART + part, lse, mask=row_ok)


@triton.jit
def _decode_merge(O_PART, LSE_PART, OUT, LSE, num_splits, D: tl.constexpr, BLOCK_S: tl.constexpr):
    """One (sequence, query head): the chunks' partial outputs weighted by their LSEs, online over the chunks."""
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    m = tl.full([], float("-inf"), dtype=tl.float32)
    total = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for s0 in tl.range(0, num_splits, BLOCK_S):
        part = row * num_splits + s0 + offs_s
        ok = s0 + offs_s < num_splits
        lse = tl.load(LSE_PART + part, mask=ok, other=float("-inf"))
        o = tl.load(O_PART + part[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)
        m_new = tl.maximum(m, tl.max(lse, 0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # all chunks empty so far: no NaN from -inf - -inf
        alpha = tl.math.exp2(m - m_use)
        w = tl.math.exp2(lse - m_use)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        total = total * alpha + tl.sum(w, 0)
        m = m_new
    empty = total == 0.0
    out = acc / tl.where(empty, 1.0, total)
    tl.store(OUT + row * D + offs_d, out.to(OUT.dtype.element_ty))
    tl.store(LSE + row, tl.where(empty, float("-inf"), (m + tl.math.log2(tl.where(empty, 1.0, total))) * LN2))


def split_plan(batch_kv: int, max_seqlen: int, block_n: int, sms: int, num_splits: int | None = None):
    """(number of splits, keys per split) for `batch_kv` (sequence, KV head) pairs over `max_seqlen` keys.

    By default as many splits as make `WAVES` programs per SM; never more than there are key tiles. The chunk is a
    multiple of `block_n`, and the split count is recomputed from it so that no split starts past `max_seqlen`.
    """
    tiles = max(1, triton.cdiv(max_seqlen, block_n))
    wanted = num_splits if num_splits is not None else triton.cdiv(WAVES * sms, max(1, batch_kv))
    tiles_per_split = triton.cdiv(tiles, max(1, min(tiles, wanted)))
    return triton.cdiv(tiles, tiles_per_split), tiles_per_split * block_n


def decode_fwd(q, k_cache, v_cache, cache_seqlens, softmax_scale, window_left=-1, *, num_splits=None, block_n=None,
               num_warps=None, num_stages=None):
    """Launch the split and merge kernels: q (B, H, D), k/v_cache (B, S, Hkv, D) with any strides, cache_seqlens
    (B,) int32 or None; `window_left` >= 0 keeps only the keys that many before the newest and on (-1: all), and the
    splits then share those window_left + 1 keys of each sequence instead of the whole cache.
    Returns out (B, H, D) in q's dtype and lse (B, H) fp32. The keyword arguments override the split count and the
    tile config (tests and the benchmark's sweep)."""
    batch, heads, d = q.shape
    max_seqlen, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    tile_n, warps, stages = TILES[d]
    block_n = block_n or tile_n
    sms = sm_count(q.device) if q.is_cuda else INTERPRETER_SMS
    # a window's keys are the last window_left + 1 of each sequence: the splits share those, not the whole cache
    span = min(max_seqlen, window_left + 1) if window_left >= 0 else max_seqlen
    splits, chunk = split_plan(batch * kv_heads, span, block_n, sms, num_splits)
    out = torch.empty((batch, heads, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads), dtype=torch.float32, device=q.device)
    if out.numel() == 0 or max_seqlen == 0:  # no kernels: an empty cache need not even have a valid pointer
        return out.zero_(), lse.fill_(float("-inf"))
    o_part = torch.empty((batch, heads, splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    seqlens = cache_seqlens if cache_seqlens is not None else lse_part  # never read without HAS_SEQLENS
    _decode_split[(splits, batch * kv_heads)](
        q, k_cache, v_cache, seqlens, o_part, lse_part,
        softmax_scale * LOG2E, max_seqlen, chunk, splits, max(window_left, 0),
        *q.stride(), *k_cache.stride(), *v_cache.stride(),
        HKV=kv_heads, GROUP=group, D=d, BLOCK_H=max(MIN_GROUP_ROWS, triton.next_power_of_2(group)),
        BLOCK_N=block_n, HAS_SEQLENS=cache_seqlens is not None, HAS_WINDOW=window_left >= 0,
        num_warps=num_warps or warps, num_stages=num_stages or stages,
    )
    _decode_merge[(batch * heads,)](
        o_part, lse_part, out, lse, splits, D=d, BLOCK_S=min(MERGE_BLOCK_S, triton.next_power_of_2(splits)),
        num_warps=4,
    )
    return out, lse
