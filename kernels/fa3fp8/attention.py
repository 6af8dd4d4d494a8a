"""Triton forward attention for Hopper (FlashAttention-3 style), BF16/FP16 and FP8 e4m3, packed sequences.

One program computes one (tile of BLOCK_M queries, sequence, head): Q, K and V tiles come in through TMA tensor
descriptors made on the device, QKᵀ and PV run on wgmma through `tl.dot`, the softmax is online (FlashAttention-2
rescaling, in base 2). Dense batches are packed sequences of equal length.
"""

import math

import torch
import triton
import triton.language as tl

from . import attention_sm90, configs, env
from .fastmath import exp2_mixed
from .gpu import sm_count
from .quantize import to_e4m3
from .reference import NO_WINDOW, P_SHIFT

LOG2E = 1.4426950408889634
UNBOUNDED = 1 << 30  # a window bound past every key: the kernel's int32 key arithmetic stays in range


@triton.jit
def _softmax_pv(
    acc, l_i, m_i, vs_prev, vs, s, n0, desc_v, vcol, k_start, hk, scale, offs_m, offs_n, seqlen_k, diag,
    win_left, win_right,
    D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    IS_FP8: tl.constexpr, P_SHIFT: tl.constexpr, ROUND_FIRST: tl.constexpr, FAST_EXP: tl.constexpr,
):
    """Online softmax of one raw score tile s = Q·K[n0:n0+BLOCK_N]ᵀ (FlashAttention-2 rescaling, base 2), then
    acc += P·V. FP8: P is shifted by 2**P_SHIFT into e4m3's normal range."""
    if MASKED:
        # diagonal band / window edges / ragged end: key j is visible to query i when j < seqlen_k and j <= i + diag
        # (causal), and i + diag - win_left <= j <= i + diag + win_right (WINDOW)
        cols = n0 + offs_n
        visible = cols[None, :] < seqlen_k
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + diag)
        if WINDOW:
            at = offs_m[:, None] + diag
            visible = visible & (cols[None, :] >= at - win_left) & (cols[None, :] <= at + win_right)
        s = tl.where(visible, s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        x = s - (m_use[:, None] - P_SHIFT)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
        m_use = m_new
        x = s * scale - (m_use[:, None] - P_SHIFT)
    if FAST_EXP:
        p = exp2_mixed(x)
    else:
        p = tl.math.exp2(x)
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    if IS_FP8:
        # acc is kept in units of the current V tile's scale vs: acc_true = acc * vs
        acc = acc * (alpha * (vs_prev / vs))[:, None]
        v = desc_v.load([hk * D, vcol + n0]).T
        acc = tl.dot(to_e4m3(p, ROUND_FIRST), v, acc)
    else:
        acc = acc * alpha[:, None]
        v = desc_v.load([k_start + n0, hk * D])
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _attn_tiles(
    acc, l_i, m_i, vs_prev, q, desc_k, desc_v, KS, VS, kblk, vcol, k_start, hk, qk_scale, lo, hi,
    offs_m, offs_n, seqlen_k, diag, win_left, win_right,
    D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    IS_FP8: tl.constexpr, P_SHIFT: tl.constexpr, ROUND_FIRST: tl.constexpr, FAST_EXP: tl.constexpr,
):
    """Key tiles [lo, hi): QKᵀ, online softmax, PV. FP8: vs_prev is the V scale acc is expressed in."""
    vs_entry = vs_prev
    for n0 in tl.range(lo, hi, BLOCK_N):
        s = tl.dot(q, desc_k.load([k_start + n0, hk * D]).T)
        scale = qk_scale
        vs = vs_prev
        if IS_FP8:
            # scales are loaded, never carried across iterations: a loop-carried loaded value stops the
            # pipeliner from prefetching anything in the loop
            tile = kblk + n0 // BLOCK_N
            scale = scale * tl.load(KS + tile)
            vs = tl.load(VS + tile)
            vs_prev = tl.where(n0 == lo, vs_entry, tl.load(VS + tile - 1, mask=n0 > lo, other=1.0))
        acc, l_i, m_i = _softmax_pv(
            acc, l_i, m_i, vs_prev, vs, s, n0, desc_v, vcol, k_start, hk, scale, offs_m, offs_n, seqlen_k,
            diag, win_left, win_right, D, BLOCK_N, MASKED, CAUSAL, WINDOW, IS_FP8, P_SHIFT, ROUND_FIRST, FAST_EXP,
        )
    vs_prev = vs_entry
    if IS_FP8:
        vs_prev = tl.where(hi > lo, tl.load(VS + kblk + (hi - 1) // BLOCK_N, mask=hi > lo, other=1.0), vs_entry)
    return acc, l_i, m_i, vs_prev


@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE, QS, KS, VS, CU_Q, CU_K, CU_BQ, CU_BK,
    qk_scale, total_q, total_k, v_cols, n_blocks_q, n_blocks_k, seq_bucket, win_left, win_right,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    IS_FP8: tl.constexpr, P_SHIFT: tl.constexpr, ROUND_FIRST: tl.constexpr, FAST_EXP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // (H // HKV)
    q_start = tl.load(CU_Q + b)
    seqlen_q = tl.load(CU_Q + b + 1) - q_start
    k_start = tl.load(CU_K + b)
    seqlen_k = tl.load(CU_K + b + 1) - k_start
    if CAUSAL:
        m_blk = tl.num_programs(0) - 1 - pid_m  # longest rows first: better tail balance
    else:
        m_blk = pid_m
    m0 = m_blk * BLOCK_M
    if IS_FP8:
        desc_v = tl.make_tensor_descriptor(V, shape=[HKV * D, v_cols], strides=[v_cols, 1], block_shape=[D, BLOCK_N])
    else:
        desc_v = tl.make_tensor_descriptor(V, shape=[total_k, HKV * D], strides=[HKV * D, 1], block_shape=[BLOCK_N, D])
    desc_q = tl.make_tensor_descriptor(Q, shape=[total_q, H * D], strides=[H * D, 1], block_shape=[BLOCK_M, D])
    desc_k = tl.make_tensor_descriptor(K, shape=[total_k, HKV * D], strides=[HKV * D, 1], block_shape=[BLOCK_N, D])
    q = desc_q.load([q_start + m0, h * D])
    kblk = 0  # this sequence's first K/V tile: scale index, and V column / BLOCK_N
    vcol = 0
    if IS_FP8:
        qk_scale = qk_scale * tl.load(QS + h * n_blocks_q + tl.load(CU_BQ + b) + m_blk, mask=m0 < seqlen_q, other=1.0)
        vcol = tl.load(CU_BK + b) * BLOCK_N
        kblk = hk * n_blocks_k + tl.load(CU_BK + b)

    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    diag = seqlen_k - seqlen_q  # bottom-right causal alignment
    lo = 0  # key tiles [lo, n_lo) are masked (the window's left edge), [n_lo, n_full) whole, [n_full, hi) masked
    if WINDOW:  # win_right is 0 when causal
        hi = tl.maximum(tl.minimum(seqlen_k, m0 + BLOCK_M + diag + win_right), 0)
        n_full = tl.maximum(tl.minimum(seqlen_k, m0 + 1 + diag + win_right), 0) // BLOCK_N * BLOCK_N
        lo = tl.maximum(m0 + diag - win_left, 0) // BLOCK_N * BLOCK_N
        n_lo = tl.minimum(tl.cdiv(tl.maximum(m0 + BLOCK_M - 1 + diag - win_left, 0), BLOCK_N) * BLOCK_N, hi)
        n_full = tl.maximum(n_full, n_lo)
    elif CAUSAL:
        hi = tl.maximum(tl.minimum(seqlen_k, m0 + BLOCK_M + diag), 0)
        n_full = tl.maximum(tl.minimum(seqlen_k, m0 + 1 + diag), 0) // BLOCK_N * BLOCK_N
    else:
        hi = seqlen_k
        n_full = seqlen_k // BLOCK_N * BLOCK_N
    # tiles past this sequence's end (varlen) run no iterations and store nothing
    hi = tl.where(m0 < seqlen_q, hi, 0)
    n_full = tl.where(m0 < seqlen_q, n_full, 0)

    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    vs_prev = tl.full([], 1.0, tl.float32)
    if WINDOW:
        n_lo = tl.where(m0 < seqlen_q, n_lo, 0)
        acc, l_i, m_i, vs_prev = _attn_tiles(
            acc, l_i, m_i, vs_prev, q, desc_k, desc_v, KS, VS, kblk, vcol, k_start, hk, qk_scale, lo, n_lo,
            offs_m, offs_n, seqlen_k, diag, win_left, win_right, D, BLOCK_N, True, CAUSAL, WINDOW, IS_FP8, P_SHIFT,
            ROUND_FIRST, FAST_EXP,
        )
        lo = n_lo
    # off-band: tiles every row of this block sees entirely
    acc, l_i, m_i, vs_prev = _attn_tiles(
        acc, l_i, m_i, vs_prev, q, desc_k, desc_v, KS, VS, kblk, vcol, k_start, hk, qk_scale, lo, n_full,
        offs_m, offs_n, seqlen_k, diag, win_left, win_right, D, BLOCK_N, False, CAUSAL, WINDOW, IS_FP8, P_SHIFT,
        ROUND_FIRST, FAST_EXP,
    )
    # diagonal band and ragged end
    acc, l_i, m_i, vs_prev = _attn_tiles(
        acc, l_i, m_i, vs_prev, q, desc_k, desc_v, KS, VS, kblk, vcol, k_start, hk, qk_scale, n_full, hi,
        offs_m, offs_n, seqlen_k, diag, win_left, win_right, D, BLOCK_N, True, CAUSAL, WINDOW, IS_FP8, P_SHIFT,
        ROUND_FIRST, FAST_EXP,
    )

    # epilogue: normalize; fully masked rows (l = 0) give zeros and lse = -inf
    if IS_FP8:
        acc = acc * vs_prev
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = (m_i - P_SHIFT + tl.math.log2(l_i)) * 0.6931471805599453
    offs_d = tl.arange(0, D)
    row_ok = offs_m < seqlen_q
    o_ptrs = O + (q_start + offs_m)[:, None] * (H * D) + h * D + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + h * total_q + q_start + offs_m, lse, mask=row_ok)


def _prune(configs_, named_args, **kwargs):
    return configs.prune(configs_, {**named_args, **kwargs})


_attn_fwd_tuned = triton.autotune(
    configs=configs.CONFIGS,
    key=["D", "CAUSAL", "WINDOW", "IS_FP8", "seq_bucket"],
    prune_configs_by={"early_config_prune": _prune},
    cache_results=True,  # timings kept in Triton's cache dir: a restarted worker does not tune again
)(_attn_fwd)


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def seq_bucket(max_seqlen: int) -> int:
    """Autotune bucket of the query length: 1K, 4K, 16K and longer."""
    return min(4 ** max(0, math.ceil(math.log(max(max_seqlen, 1) / 1024, 4))), 16)


def attention_fwd(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
    q_scale=None, k_scale=None, v_scale=None, cu_blocks_q=None, cu_blocks_k=None, out_dtype=None, config=None,
    v_permuted=False, max_seqlen_k=None, window_size=NO_WINDOW,
):
    """Launch the forward kernel on packed tensors. BF16/FP16: q (Tq, H, D), k/v (Tk, Hkv, D). FP8 (when scales
    are given): e4m3 q, k and v transposed tile by tile (Hkv, D, n_blocks_k * BLOCK_N); with `v_permuted` (V's keys
    in the CUDA kernel's order) the CUDA kernel runs, else this one. Returns out (Tq, H, D) and lse (H, Tq) fp32,
    and the compiled kernel (None for the CUDA one); `config` (a triton.Config) bypasses autotuning; `max_seqlen_k`
    (the longest sequence's keys, when known) picks the CUDA kernel's settings for short causal attention and sizes
    its split of a last round. `window_size` (left, right; -1: unbounded) hides keys as reference.visible_keys
    does; windows run this kernel, or causal ones the CUDA kernel where attention_sm90.serves_windows (a windowed FP8
    bundle is `v_permuted` exactly then)."""
    total_q, heads, d = q.shape
    total_k, kv_heads, _ = k.shape
    batch = cu_seqlens_q.shape[0] - 1
    is_fp8 = q_scale is not None
    windowed = tuple(window_size) != NO_WINDOW
    interpreting = env.interpreting()
    cuda_window = (windowed and causal and config is None and not interpreting
                   and attention_sm90.serves_windows(d) and (is_fp8 or attention_sm90.supported_16bit(q, k, v)))
    if windowed and is_fp8 and v_permuted != cuda_window:
        raise ValueError(f"a window on the {'CUDA' if cuda_window else 'Triton'} kernel needs V's keys "
                         f"{'permuted' if cuda_window else 'in order'}")
    choice = env.kernel() if config is None and not interpreting else "triton"
    # every sequence as long as the longest (known on the host: no lookup of cu_seqlens)
    equal_lengths = max_seqlen_k is not None and total_q == batch * max_seqlen_q and total_k == batch * max_seqlen_k
    launch = (batch * heads, max_seqlen_q, sm_count(q.device)) if q.is_cuda else None
    best = attention_sm90.planned_settings(d, is_fp8, causal, max_seqlen_k, equal_lengths, launch)
    if windowed:
        choice = "cuda" if cuda_window else "triton"
        best = {**attention_sm90.WINDOW_SETTINGS[(d, is_fp8)], "window_left": window_size[0]} if cuda_window else None
    if choice == "auto":
        choice = "cuda" if best is not None else "triton"
    q_block, block_n = configs.fp8_blocks(d) if is_fp8 else (None, None)
    if v_permuted:
        if not attention_sm90.supported(d, q_block, block_n):
            raise RuntimeError(f"V is key-permuted for the CUDA kernel, which is not available for head dim {d}")
        out, lse = attention_sm90.attention_fp8_fwd_sm90(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
            q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k, q_block, out_dtype or torch.bfloat16,
            max_seqlen_k=max_seqlen_k, **(best or {}),
        )
        return out, lse, None
    if choice == "cuda" and not is_fp8 and attention_sm90.supported_16bit(q, k, v):
        out, lse = attention_sm90.attention_fwd_sm90(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal, max_seqlen_k=max_seqlen_k,
            **(best or {}),
        )
        return out, lse, None
    out = torch.empty(q.shape, dtype=out_dtype or q.dtype, device=q.device)
    lse = torch.empty((heads, total_q), dtype=torch.float32, device=q.device)
    if total_q == 0 or batch == 0:
        return out, lse, None
    if is_fp8:
        scales = (q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k)
        v_cols, n_blocks_q, n_blocks_k = v.shape[-1], q_scale.shape[-1], k_scale.shape[-1]
    else:
        scales = (cu_seqlens_q,) * 5  # the FP8-only pointers are never read
        v_cols, n_blocks_q, n_blocks_k = 0, 0, 0
    qs, ks, vs, cbq, cbk = scales
    args = (q, k, v, out, lse, qs, ks, vs, cu_seqlens_q, cu_seqlens_k, cbq, cbk)
    left, right = window_size
    win_left = left if left >= 0 else UNBOUNDED
    win_right = 0 if causal else right if right >= 0 else UNBOUNDED
    scalars = (softmax_scale * LOG2E, total_q, total_k, v_cols, n_blocks_q, n_blocks_k, seq_bucket(max_seqlen_q),
               win_left, win_right)
    # FAST_EXP (fastmath.exp2_mixed, inline PTX: not under the interpreter) measured +2% for BF16 at d128/d256 on
    # the H200 and 3-9% slower for FP8, whose FMA pipe rather than its SFU is the busier one
    consts = dict(H=heads, HKV=kv_heads, D=d, CAUSAL=causal, WINDOW=windowed, IS_FP8=is_fp8,
                  P_SHIFT=float(P_SHIFT) if is_fp8 else 0.0,
                  ROUND_FIRST=interpreting, FAST_EXP=not is_fp8 and not interpreting)
    if config is None and interpreting:
        config = configs.interpret_config()
    triton.set_allocator(_alloc)
    if config is None:
        grid = lambda meta: (triton.cdiv(max_seqlen_q, meta["BLOCK_M"]), batch * heads)  # noqa: E731
        kernel = _attn_fwd_tuned[grid](*args, *scalars, **consts)
    else:
        grid = (triton.cdiv(max_seqlen_q, config.kwargs["BLOCK_M"]), batch * heads)
        kernel = _attn_fwd[grid](
            *args, *scalars, **consts, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages
        )
    return out, lse, kernel
