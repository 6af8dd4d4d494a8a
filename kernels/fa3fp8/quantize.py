"""Fused FP8 quantization: Hadamard rotation, one scale per (head, tile of rows), e4m3 data, V transposed (keys
optionally in the CUDA kernel's order, fp8_layout.v_key_positions).

One program handles one tile of one sequence and one head: it loads the rows, multiplies them by the
random-sign Hadamard matrix (a tensor-core product with ±1 entries, so exact products and fp32 sums),
takes the tile's absolute maximum and writes x · 448 / amax as e4m3 with scale amax / 448.
"""

import torch
import triton
import triton.language as tl

from . import env
from .fp8_layout import E4M3_MAX, block_offsets
from .hadamard import sign_hadamard


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
def _quantize_kernel(
    X, Y, SCALE, R, CU, CU_B, y_cols, n_blocks, inv_sqrt_d,
    HX: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, HADAMARD: tl.constexpr, TRANSPOSE: tl.constexpr,
    PERMUTE: tl.constexpr, POW2_SCALE: tl.constexpr, FP8_MAX: tl.constexpr, ROUND_FIRST: tl.constexpr,
):
    blk = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    start = tl.load(CU + b)
    seqlen = tl.load(CU + b + 1) - start
    if blk * BLOCK < seqlen:
        rows = blk * BLOCK + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, D)
        row_ok = (rows < seqlen)[:, None]
        x = tl.load(X + (start + rows)[:, None] * (HX * D) + h * D + offs_d[None, :], mask=row_ok, other=0.0)
        if HADAMARD:
            r = tl.load(R + offs_d[:, None] * D + offs_d[None, :])
            x = tl.dot(x, r) * inv_sqrt_d
        else:
            x = x.to(tl.float32)
        amax = tl.maximum(tl.max(tl.max(tl.abs(x), 1), 0), 1e-12)
        if POW2_SCALE:  # fp8_layout.pow2_scale, from amax's bits; 1 / scale is exact
            bits = amax.to(tl.int32, bitcast=True)
            exponent = (bits >> 23) - 8 + ((bits & 0x7FFFFF) > 0x600000).to(tl.int32)
            scale = (exponent << 23).to(tl.float32, bitcast=True)
            y = to_e4m3(x * ((254 - exponent) << 23).to(tl.float32, bitcast=True), ROUND_FIRST)
        else:
            scale = amax / FP8_MAX
            y = to_e4m3(x * (FP8_MAX / amax), ROUND_FIRST)
        tile = tl.load(CU_B + b) + blk
        if TRANSPOSE:
            # whole tile, zero rows past the sequence's end included; stored (D, BLOCK) so writes are coalesced
            keys = tl.arange(0, BLOCK)
            if PERMUTE:  # fp8_layout.v_key_positions
                keys = (keys & -16) | (((keys >> 1) & 3) << 2) | (((keys >> 3) & 1) << 1) | (keys & 1)
            cols = tile * BLOCK + keys
            tl.store(Y + (h * D + offs_d)[:, None] * y_cols + cols[None, :], tl.trans(y))
        else:
            tl.store(Y + (start + rows)[:, None] * (HX * D) + h * D + offs_d[None, :], y, mask=row_ok)
        tl.store(SCALE + h * n_blocks + tile, scale)


def quantize_blocks(x, cu_seqlens, max_seqlen, block, hadamard, transpose=False, permute=False, pow2_scale=False):
    """Quantize packed x (T, H, D) per (head, tile of `block` rows of a sequence) to e4m3, with scale amax / 448 or,
    with `pow2_scale`, the power of two fp8_layout.pow2_scale (V's).

    Returns data (T, H, D), or (H, D, n_blocks * block) tile by tile with `transpose` (with `permute`, each tile's
    keys at fp8_layout.v_key_positions; block a multiple of 32), the fp32 scales
    (H, n_blocks; entries past cu_blocks[-1] are unused and unset) and the int32 tile offsets per sequence
    (cu_blocks).
    """
    total, heads, d = x.shape
    batch = cu_seqlens.shape[0] - 1
    cu_blocks, n_blocks = block_offsets(cu_seqlens, total, block)
    scale = torch.empty((heads, n_blocks), dtype=torch.float32, device=x.device)
    if transpose:
        y_cols = n_blocks * block
        y = torch.empty((heads, d, y_cols), dtype=torch.float8_e4m3fn, device=x.device)
    else:
        y_cols = 0
        y = torch.empty((total, heads, d), dtype=torch.float8_e4m3fn, device=x.device)
    if total == 0 or batch == 0:
        return y, scale, cu_blocks
    r = sign_hadamard(d, dtype=x.dtype, device=str(x.device))
    grid = (triton.cdiv(max_seqlen, block), heads, batch)
    _quantize_kernel[grid](
        x, y, scale, r, cu_seqlens, cu_blocks, y_cols, n_blocks, d**-0.5,
        HX=heads, D=d, BLOCK=block, HADAMARD=hadamard, TRANSPOSE=transpose, PERMUTE=permute, POW2_SCALE=pow2_scale,
        FP8_MAX=E4M3_MAX, ROUND_FIRST=env.interpreting(), num_warps=8,
    )
    return y, scale, cu_blocks
