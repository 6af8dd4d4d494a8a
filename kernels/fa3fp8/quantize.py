"""Fused FP8 quantization: Hadamard rotation, one scale per (head, tile of rows), e4m3 data, V transposed (keys
optionally in the CUDA kernel's order, fp8_layout.v_key_positions).

Each tile of one sequence and one head is quantized on its own: its rows are multiplied by the random-sign Hadamard
matrix, and x · 448 / amax is written as e4m3 with scale amax / 448 (amax: the tile's absolute maximum). The rotation
is two tensor-core products with Sylvester's matrix of half the size (hadamard.py), one per half of each row (signs
applied first), whose sum and difference are the rotated halves: ±1 entries, so exact products and fp32 sums, and half
the FLOPs and a quarter of the matrix that one product with the whole matrix takes. A program walks a sequence's tiles
of one head with a stride, a few programs per SM in all, so that it loads the Hadamard matrix once, and the SM's other
programs' loads overlap its work (or, pipelined, its own next tiles'). The input may be any (token, head) strided view
with contiguous rows, such as the (batch, heads, seq, d) tensor transformers hands attention, transposed: it is read
in place. GPU time on the H200 (benchmarks/quantize.py), one layer's Q, K and V (d128): 0.623 ms at 128K tokens (32 /
8 heads), 0.090 ms at 16K (16 / 16 heads), 0.051 ms at 8K (32 / 8): 0.78-1.24x a plain copy's byte rate. quantize_qkv
runs its three parts in one launch (quantize_qkv_blocks): a launch costs the host ~25-30 us, and one grid also lets
one part's programs fill the SMs that another's last round leaves idle.
"""

import torch
import triton
import triton.language as tl

from . import env
from .fp8_layout import E4M3_MAX, tile_bound
from .gpu import sm_count
from .hadamard import signs, sylvester

# (head dim, rows per tile, transposed) -> (programs per SM the grid is sized for, tiles in flight per program, warps
# per program), from benchmarks/quantize.py on the H200 (session 14: each part alone in GPU time at 8K, 16K and 128K
# tokens, heads-major input; `quantize-nvidia-h200-2026-12-02-session14-parts.json`). d128: Q's 64-row tiles
# 31.7-456 us against 33.9-478 with every part on four programs of three 4-warp stages (session 7's choice); K's
# 128-row tiles on 8 warps, whose fp32 tile then takes 64 registers a thread instead of 128 (4 warps: 239 registers,
# one program per SM), 10.7-120 us against 12.2-154; V (no rotation; transposed through shared memory) one tile at a
# time, 6.0-108 us against 6.1-112. d256 (16K tokens, session 23, the rotation in halves): Q and K one program per SM
# of two 8-warp stages, 44.7 us each against 56 with one stage (its 32 KB half-size matrix leaves room for a second
# tile; the whole matrix took 128 KB), V on 16 warps 34 us. d64: untimed, session 7's choice.
PIPELINE = {
    (64, 64, False): (4, 3, 4), (64, 128, False): (4, 3, 4), (64, 128, True): (4, 3, 4),
    (128, 64, False): (2, 3, 4), (128, 128, False): (2, 2, 8), (128, 128, True): (8, 1, 4),
    (256, 128, False): (1, 2, 8), (256, 128, True): (1, 1, 16),
}
OTHER_TILES = (4, 1, 4)  # tiles PIPELINE does not list: the interpreter's small ones, where these do not matter
# head dim -> warps of quantize_qkv_blocks' one launch of the three parts. H100, session 38 (benchmarks/quantize.py,
# GPU time of a layer, heads-major): d128 4 and 8 warps level, 0.827 / 0.055 / 0.104 ms at 128K / 8K (32 / 8 heads) /
# 16K (16 / 16) against 0.874 / 0.065 / 0.114 in a launch per part; d256 8 warps 0.125 ms at 16K (8 / 8), 16 warps
# 0.151, a launch per part 0.135; d64 4 warps 0.126 ms at 16K (32 / 32), 8 warps 0.133, a launch per part 0.126-0.129
# (`quantize-nvidia-h100-80gb-hbm3-2026-12-05-session38.json`)
ONE_LAUNCH_WARPS = {64: 4, 128: 8, 256: 8}


@triton.jit
def to_e4m3(x, ROUND_FIRST: tl.constexpr):
    """fp32 -> e4m3, rounded to nearest. ROUND_FIRST (interpreter only) rounds onto e4m3's grid in fp32 first
    (ties away from zero): Triton's CPU interpreter casts without carrying a mantissa overflow into the exponent."""
    if ROUND_FIRST:
        mag = tl.abs(x)
        exponent = tl.maximum(tl.floor(tl.math.log2(tl.maximum(mag, 1e-30))), -6.0)
        ulp = tl.math.exp2(exponent - 3.0)
        mag = tl.minimum(tl.floor(mag / ulp + 0.5) * ulp, 448.0)
        x = tl.where(x < 0, -mag, mag)
    return x.to(tl.float8e4nv)


@triton.jit
def _tiles_before(CU, b, BLOCK: tl.constexpr, CHUNK: tl.constexpr = 128):
    """Tiles of BLOCK rows in the sequences before sequence b (cu_seqlens CU), CHUNK sequences at a time."""
    tiles = tl.zeros((CHUNK,), dtype=tl.int32)
    for i0 in range(0, b, CHUNK):
        i = i0 + tl.arange(0, CHUNK)
        lens = tl.load(CU + i + 1, mask=i < b, other=0) - tl.load(CU + i, mask=i < b, other=0)
        tiles += (lens + BLOCK - 1) // BLOCK
    return tl.sum(tiles, 0)


@triton.jit
def _quantize_tiles(
    X, Y, SCALE, SIGNS, H, CU, CU_B, pid, programs, h, b, stride_t, stride_h, y_cols, n_blocks, inv_sqrt_d,
    HX: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, HADAMARD: tl.constexpr, TRANSPOSE: tl.constexpr,
    PERMUTE: tl.constexpr, POW2_SCALE: tl.constexpr, WRITE_CU_B: tl.constexpr, FP8_MAX: tl.constexpr,
    ROUND_FIRST: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """Tiles pid, pid + programs, ... of sequence b, head h of X: rotated (HADAMARD), scaled and written as e4m3 to
    Y (TRANSPOSE: tile by tile as (D, BLOCK)), each tile's scale to SCALE; with WRITE_CU_B, program 0 of head 0 writes
    the sequence's tile offset to CU_B."""
    start = tl.load(CU + b)
    seqlen = tl.load(CU + b + 1) - start
    first_tile = _tiles_before(CU, b, BLOCK)
    if WRITE_CU_B:
        if (pid == 0) & (h == 0):  # the tile offsets (cu_blocks) without a cumulative sum on the host
            tl.store(CU_B + b + 1, first_tile + tl.cdiv(seqlen, BLOCK))
            if b == 0:
                tl.store(CU_B, 0)
    HALF: tl.constexpr = D // 2
    offs_d = tl.arange(0, HALF)  # each row in two halves, lo and hi
    if HADAMARD:
        sylvester_half = tl.load(H + offs_d[:, None] * HALF + offs_d[None, :])
        signs_lo = tl.load(SIGNS + offs_d)[None, :]
        signs_hi = tl.load(SIGNS + HALF + offs_d)[None, :]
    for blk in tl.range(pid, tl.cdiv(seqlen, BLOCK), programs, num_stages=NUM_STAGES):
        rows = tl.arange(0, BLOCK)
        if PERMUTE:
            # row i of the tile is the key stored at position i (the inverse of fp8_layout.v_key_positions), so the
            # transposed tile is stored in plain column order: permuted store addresses are written byte by byte
            rows = (rows & -16) | (((rows >> 1) & 1) << 3) | (((rows >> 2) & 3) << 1) | (rows & 1)
        rows += blk * BLOCK
        row_ok = (rows < seqlen)[:, None]
        tokens = (start + rows).to(tl.int64)
        x_ptrs = X + tokens[:, None] * stride_t + h * stride_h + offs_d[None, :]
        lo = tl.load(x_ptrs, mask=row_ok, other=0.0)
        hi = tl.load(x_ptrs + HALF, mask=row_ok, other=0.0)
        if HADAMARD:  # x · diag(signs) · [[H, H], [H, -H]]
            lo_h = tl.dot(lo * signs_lo, sylvester_half)
            hi_h = tl.dot(hi * signs_hi, sylvester_half)
            lo, hi = (lo_h + hi_h) * inv_sqrt_d, (lo_h - hi_h) * inv_sqrt_d
        else:
            lo, hi = lo.to(tl.float32), hi.to(tl.float32)
        amax = tl.maximum(tl.max(tl.max(tl.maximum(tl.abs(lo), tl.abs(hi)), 1), 0), 1e-12)
        if POW2_SCALE:  # fp8_layout.pow2_scale, from amax's bits; 1 / scale is exact
            bits = amax.to(tl.int32, bitcast=True)
            exponent = (bits >> 23) - 8 + ((bits & 0x7FFFFF) > 0x600000).to(tl.int32)
            scale = (exponent << 23).to(tl.float32, bitcast=True)
            factor = ((254 - exponent) << 23).to(tl.float32, bitcast=True)
        else:
            scale = amax / FP8_MAX
            factor = FP8_MAX / amax
        y_lo = to_e4m3(lo * factor, ROUND_FIRST)
        y_hi = to_e4m3(hi * factor, ROUND_FIRST)
        tile = first_tile + blk
        if TRANSPOSE:
            # whole tile, zero rows past the sequence's end included; stored (D, BLOCK) so writes are coalesced
            cols = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            y_ptrs = Y + (h * D + offs_d)[:, None].to(tl.int64) * y_cols + cols[None, :]
            tl.store(y_ptrs, tl.trans(y_lo))
            tl.store(y_ptrs + HALF * y_cols.to(tl.int64), tl.trans(y_hi))
        else:
            y_ptrs = Y + tokens[:, None] * (HX * D) + h * D + offs_d[None, :]
            tl.store(y_ptrs, y_lo, mask=row_ok)
            tl.store(y_ptrs + HALF, y_hi, mask=row_ok)
        tl.store(SCALE + h * n_blocks + tile, scale)


@triton.jit
def _quantize_kernel(
    X, Y, SCALE, SIGNS, H, CU, CU_B, stride_t, stride_h, y_cols, n_blocks, inv_sqrt_d,
    HX: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, HADAMARD: tl.constexpr, TRANSPOSE: tl.constexpr,
    PERMUTE: tl.constexpr, POW2_SCALE: tl.constexpr, FP8_MAX: tl.constexpr, ROUND_FIRST: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """One part: grid (programs per (sequence, head), heads, sequences)."""
    _quantize_tiles(
        X, Y, SCALE, SIGNS, H, CU, CU_B, tl.program_id(0), tl.num_programs(0), tl.program_id(1), tl.program_id(2),
        stride_t, stride_h, y_cols, n_blocks, inv_sqrt_d, HX, D, BLOCK, HADAMARD, TRANSPOSE, PERMUTE, POW2_SCALE, True,
        FP8_MAX, ROUND_FIRST, NUM_STAGES,
    )


@triton.jit
def _quantize_qkv_kernel(
    Q, K, V, Q8, K8, V8T, Q_SCALE, K_SCALE, V_SCALE, SIGNS, H, CU_Q, CU_K, CU_BQ, CU_BK,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, programs_q, programs_k, programs_v,
    n_blocks_q, n_blocks_k, v_cols, inv_sqrt_d,
    HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HADAMARD: tl.constexpr, PERMUTE_V: tl.constexpr, FP8_MAX: tl.constexpr, ROUND_FIRST: tl.constexpr,
    STAGES_Q: tl.constexpr, STAGES_K: tl.constexpr, STAGES_V: tl.constexpr,
):
    """Q (HQ heads; none where HQ is 0), K and V in one launch: grid (the most programs per (sequence, head) of the
    three parts, HQ + 2 HK, sequences); axis 1 picks the part and its head, and each part keeps its own program
    count and pipeline. V writes no tile offsets: they are K's."""
    pid = tl.program_id(0)
    hh = tl.program_id(1)
    b = tl.program_id(2)
    if hh < HQ:
        if pid < programs_q:
            _quantize_tiles(
                Q, Q8, Q_SCALE, SIGNS, H, CU_Q, CU_BQ, pid, programs_q, hh, b, stride_qt, stride_qh, 0, n_blocks_q,
                inv_sqrt_d, HQ, D, BLOCK_M, HADAMARD, False, False, False, True, FP8_MAX, ROUND_FIRST, STAGES_Q,
            )
    elif hh < HQ + HK:
        if pid < programs_k:
            _quantize_tiles(
                K, K8, K_SCALE, SIGNS, H, CU_K, CU_BK, pid, programs_k, hh - HQ, b, stride_kt, stride_kh, 0,
                n_blocks_k, inv_sqrt_d, HK, D, BLOCK_N, HADAMARD, False, False, False, True, FP8_MAX, ROUND_FIRST,
                STAGES_K,
            )
    elif pid < programs_v:
        _quantize_tiles(
            V, V8T, V_SCALE, SIGNS, H, CU_K, CU_BK, pid, programs_v, hh - HQ - HK, b, stride_vt, stride_vh, v_cols,
            n_blocks_k, inv_sqrt_d, HK, D, BLOCK_N, False, True, PERMUTE_V, True, False, FP8_MAX, ROUND_FIRST,
            STAGES_V,
        )


def _programs_per_sequence(x: torch.Tensor, tiles: int, heads_x_batch: int, programs_per_sm: int) -> int:
    """Programs per (sequence, head) so that the grid holds about programs_per_sm per SM (at least one per
    (sequence, head), at most one per tile). The interpreter runs one, which walks all its tiles."""
    if x.device.type != "cuda":
        return 1
    return max(1, min(tiles, sm_count(x.device) * programs_per_sm // heads_x_batch))


def _settings(d, block, transpose, programs_per_sm=None, stages=None, num_warps=None):
    """(programs per SM, stages, warps): those given, else PIPELINE's for this head dim, tile and layout."""
    tuned = PIPELINE.get((d, block, transpose), OTHER_TILES)
    given = (programs_per_sm, stages, num_warps)
    return tuple(default if value is None else value for value, default in zip(given, tuned))


def _outputs(x, batch, block, transpose):
    """Empty e4m3 data (T, H, D), or (H, D, n_blocks * block) with `transpose`, and fp32 scales (H, n_blocks)."""
    total, heads, d = x.shape
    n_blocks = tile_bound(total, block, batch)
    scale = torch.empty((heads, n_blocks), dtype=torch.float32, device=x.device)
    shape = (heads, d, n_blocks * block) if transpose else (total, heads, d)
    return torch.empty(shape, dtype=torch.float8_e4m3fn, device=x.device), scale


def quantize_blocks(x, cu_seqlens, max_seqlen, block, hadamard, transpose=False, permute=False, pow2_scale=False,
                    programs_per_sm=None, stages=None, num_warps=None, cu_blocks=None):
    """Quantize packed x (T, H, D) per (head, tile of `block` rows of a sequence) to e4m3, with scale amax / 448 or,
    with `pow2_scale`, the power of two fp8_layout.pow2_scale (V's). x may be any view whose last dim is
    contiguous; `programs_per_sm`, `stages` and `num_warps` size the grid, the pipeline and the programs (None:
    PIPELINE's for this head dim, tile and layout; benchmarks/quantize.py sweeps them).

    Returns data (T, H, D), or (H, D, n_blocks * block) tile by tile with `transpose` (with `permute`, each tile's
    keys at fp8_layout.v_key_positions; block a multiple of 32), the fp32 scales
    (H, n_blocks; entries past cu_blocks[-1] are unused and unset) and the int32 tile offsets per sequence
    (cu_blocks, as fp8_layout.block_offsets gives them, written by the kernel: no cumulative sum on the host), into
    `cu_blocks` where given (the offsets of another part of the same sequences and tiles, V's with K's: one allocation
    fewer).
    """
    total, heads, d = x.shape
    batch = cu_seqlens.shape[0] - 1
    y, scale = _outputs(x, batch, block, transpose)
    if cu_blocks is None:
        cu_blocks = torch.empty(batch + 1, dtype=torch.int32, device=x.device)  # written by the kernel
    if total == 0 or batch == 0:
        return y, scale, cu_blocks.zero_()
    if x.stride(-1) != 1:
        x = x.contiguous()
    programs_per_sm, stages, num_warps = _settings(d, block, transpose, programs_per_sm, stages, num_warps)
    device = str(x.device)
    grid = (_programs_per_sequence(x, triton.cdiv(max_seqlen, block), heads * batch, programs_per_sm), heads, batch)
    _quantize_kernel[grid](
        x, y, scale, signs(d, x.dtype, device), sylvester(d // 2, x.dtype, device), cu_seqlens, cu_blocks,
        x.stride(0), x.stride(1), y.shape[-1] if transpose else 0, scale.shape[1], d**-0.5,
        HX=heads, D=d, BLOCK=block, HADAMARD=hadamard, TRANSPOSE=transpose, PERMUTE=permute, POW2_SCALE=pow2_scale,
        FP8_MAX=E4M3_MAX, ROUND_FIRST=env.interpreting(), NUM_STAGES=stages, num_warps=num_warps,
    )
    return y, scale, cu_blocks


def quantize_qkv_blocks(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard,
                        permute_v, num_warps=None):
    """Q (None: K and V only), K and V as quantize_qkv quantizes them, in one launch: Q in `block_m`-row tiles and K
    in `block_n`-row ones, rotated with `hadamard`; V transposed in `block_n`-row tiles with power-of-two scales, its
    keys permuted with `permute_v`. Each part keeps PIPELINE's programs per SM and stages; `num_warps` (None:
    ONE_LAUNCH_WARPS') is the launch's. A launch costs the host ~25-30 us: at an 8K chunk (d128, 32 / 8 heads) the
    three parts take ~55 us of GPU time (H100), less than three launches take the host.

    Returns Q's (data, scales, tile offsets) or None, K's, and V's (V's tile offsets are K's tensor), each as
    quantize_blocks returns them.
    """
    batch = cu_seqlens_k.shape[0] - 1
    if batch == 0 or k.shape[0] == 0 or (q is not None and q.shape[0] == 0):  # quantize_blocks zeroes the offsets
        q_out = None if q is None else quantize_blocks(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard)
        k_out = quantize_blocks(k, cu_seqlens_k, max_seqlen_k, block_n, hadamard)
        v8t, v_scale, _ = quantize_blocks(v, cu_seqlens_k, max_seqlen_k, block_n, False, transpose=True,
                                          permute=permute_v, pow2_scale=True, cu_blocks=k_out[2])
        return q_out, k_out, (v8t, v_scale, k_out[2])
    has_q = q is not None
    q, k, v = (x if x is None or x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    parts = [(k, max_seqlen_k, block_n, False), (v, max_seqlen_k, block_n, True)]
    if has_q:
        parts.insert(0, (q, max_seqlen_q, block_m, False))
    outputs, programs, stages = [], [], []
    for x, max_seqlen, block, transpose in parts:
        per_sm, part_stages, _ = _settings(x.shape[-1], block, transpose)
        outputs.append(_outputs(x, batch, block, transpose))
        programs.append(_programs_per_sequence(x, triton.cdiv(max_seqlen, block), x.shape[1] * batch, per_sm))
        stages.append(part_stages)
    cu_blocks_k = torch.empty(batch + 1, dtype=torch.int32, device=k.device)
    cu_blocks_q = torch.empty(batch + 1, dtype=torch.int32, device=k.device) if has_q else cu_blocks_k
    if not has_q:  # K's arguments stand in Q's: with no Q heads, no program reads or writes them
        q, cu_seqlens_q, block_m = k, cu_seqlens_k, block_n
        outputs, programs, stages = ([xs[0], *xs] for xs in (outputs, programs, stages))
    (q8, q_scale), (k8, k_scale), (v8t, v_scale) = outputs
    heads_q, heads_k, d = q.shape[1] if has_q else 0, k.shape[1], k.shape[-1]
    device = str(k.device)
    _quantize_qkv_kernel[(max(programs), heads_q + 2 * heads_k, batch)](
        q, k, v, q8, k8, v8t, q_scale, k_scale, v_scale, signs(d, k.dtype, device), sylvester(d // 2, k.dtype, device),
        cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), *programs,
        q_scale.shape[1], k_scale.shape[1], v8t.shape[-1], d**-0.5,
        HQ=heads_q, HK=heads_k, D=d, BLOCK_M=block_m, BLOCK_N=block_n, HADAMARD=hadamard, PERMUTE_V=permute_v,
        FP8_MAX=E4M3_MAX, ROUND_FIRST=env.interpreting(), STAGES_Q=stages[0], STAGES_K=stages[1], STAGES_V=stages[2],
        num_warps=ONE_LAUNCH_WARPS.get(d, OTHER_TILES[2]) if num_warps is None else num_warps,
    )
    q_out = (q8, q_scale, cu_blocks_q) if has_q else None
    return q_out, (k8, k_scale, cu_blocks_k), (v8t, v_scale, cu_blocks_k)
