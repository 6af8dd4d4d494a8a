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
8 heads), 0.090 ms at 16K (16 / 16 heads), 0.051 ms at 8K (32 / 8): 0.78-1.24x a plain copy's byte rate.
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
def _quantize_kernel(
    X, Y, SCALE, SIGNS, H, CU, CU_B, stride_t, stride_h, y_cols, n_blocks, inv_sqrt_d,
    HX: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, HADAMARD: tl.constexpr, TRANSPOSE: tl.constexpr,
    PERMUTE: tl.constexpr, POW2_SCALE: tl.constexpr, FP8_MAX: tl.constexpr, ROUND_FIRST: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    h = tl.program_id(1)
    b = tl.program_id(2)
    start = tl.load(CU + b)
    seqlen = tl.load(CU + b + 1) - start
    first_tile = _tiles_before(CU, b, BLOCK)
    if (tl.program_id(0) == 0) & (h == 0):  # the tile offsets (cu_blocks) without a cumulative sum on the host
        tl.store(CU_B + b + 1, first_tile + tl.cdiv(seqlen, BLOCK))
        if b == 0:
            tl.store(CU_B, 0)
    HALF: tl.constexpr = D // 2
    offs_d = tl.arange(0, HALF)  # each row in two halves, lo and hi
    if HADAMARD:
        sylvester_half = tl.load(H + offs_d[:, None] * HALF + offs_d[None, :])
        signs_lo = tl.load(SIGNS + offs_d)[None, :]
        signs_hi = tl.load(SIGNS + HALF + offs_d)[None, :]
    for blk in tl.range(tl.program_id(0), tl.cdiv(seqlen, BLOCK), tl.num_programs(0), num_stages=NUM_STAGES):
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


def _programs_per_sequence(x: torch.Tensor, tiles: int, heads_x_batch: int, programs_per_sm: int) -> int:
    """Programs per (sequence, head) so that the grid holds about programs_per_sm per SM (at least one per
    (sequence, head), at most one per tile). The interpreter runs one, which walks all its tiles."""
    if x.device.type != "cuda":
        return 1
    return max(1, min(tiles, sm_count(x.device) * programs_per_sm // heads_x_batch))


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
    n_blocks = tile_bound(total, block, batch)
    scale = torch.empty((heads, n_blocks), dtype=torch.float32, device=x.device)
    if transpose:
        y_cols = n_blocks * block
        y = torch.empty((heads, d, y_cols), dtype=torch.float8_e4m3fn, device=x.device)
    else:
        y_cols = 0
        y = torch.empty((total, heads, d), dtype=torch.float8_e4m3fn, device=x.device)
    if cu_blocks is None:
        cu_blocks = torch.empty(batch + 1, dtype=torch.int32, device=x.device)  # written by the kernel
    if total == 0 or batch == 0:
        return y, scale, cu_blocks.zero_()
    if x.stride(-1) != 1:
        x = x.contiguous()
    tuned = PIPELINE.get((d, block, transpose), OTHER_TILES)
    programs_per_sm, stages, num_warps = (
        default if given is None else given for given, default in zip((programs_per_sm, stages, num_warps), tuned)
    )
    device = str(x.device)
    grid = (_programs_per_sequence(x, triton.cdiv(max_seqlen, block), heads * batch, programs_per_sm), heads, batch)
    _quantize_kernel[grid](
        x, y, scale, signs(d, x.dtype, device), sylvester(d // 2, x.dtype, device), cu_seqlens, cu_blocks,
        x.stride(0), x.stride(1), y_cols, n_blocks, d**-0.5,
        HX=heads, D=d, BLOCK=block, HADAMARD=hadamard, TRANSPOSE=transpose, PERMUTE=permute, POW2_SCALE=pow2_scale,
        FP8_MAX=E4M3_MAX, ROUND_FIRST=env.interpreting(), NUM_STAGES=stages, num_warps=num_warps,
    )
    return y, scale, cu_blocks
