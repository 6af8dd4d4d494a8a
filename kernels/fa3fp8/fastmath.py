"""exp2 for the softmax split between the SFU and the FMA pipes (Hopper, PTX).

The softmax of a 128x128 score tile needs 16384 exponentials; the SFU (MUFU.EX2) retires 16 per clock per SM: half
the clocks of the tile's two BF16 wgmma products. Here one exponential in four is computed on the FMA pipe
instead: 2^x = 2^round(x) · p(x - round(x)), p a degree-3 polynomial on [-0.5, 0.5] (relative error
7.5e-5, below BF16's rounding of P and far below E4M3's), 2^round(x) added to p's exponent bits. Arguments below
-126 (masked scores, -inf) give exactly 0, as exp2 does.
"""

import struct

import triton
import triton.language as tl

# minimax-weighted fit of 2^f on [-0.5, 0.5] (tests/kernels/test_fastmath.py checks the bound)
POLY = (0.9999280571937561, 0.6932609677314758, 0.24261115491390228, 0.055171653628349304)


def _f32_hex(value: float) -> str:
    return "0f" + struct.pack(">f", value).hex().upper()


_C0, _C1, _C2, _C3 = (_f32_hex(c) for c in POLY)
# operands: $0..$3 results, $4..$7 arguments; elements 0-2 on the SFU, element 3 on the FMA pipe
EXP2_MIXED_ASM = f"""{{
.reg .f32 t, r, f, p;
.reg .b32 tb, pb;
.reg .pred small;
ex2.approx.ftz.f32 $0, $4;
ex2.approx.ftz.f32 $1, $5;
ex2.approx.ftz.f32 $2, $6;
add.rn.f32 t, $7, 0f4B400000;
sub.rn.f32 r, t, 0f4B400000;
sub.rn.f32 f, $7, r;
fma.rn.f32 p, f, {_C3}, {_C2};
fma.rn.f32 p, p, f, {_C1};
fma.rn.f32 p, p, f, {_C0};
mov.b32 tb, t;
shl.b32 tb, tb, 23;
mov.b32 pb, p;
add.s32 pb, pb, tb;
setp.lt.f32 small, $7, 0fC2FC0000;
selp.b32 pb, 0, pb, small;
mov.b32 $3, pb;
}}"""
_CONSTRAINTS = "=f,=f,=f,=f,f,f,f,f"
_ASM_C = tl.constexpr(EXP2_MIXED_ASM)
_CONSTRAINTS_C = tl.constexpr(_CONSTRAINTS)


@triton.jit
def exp2_mixed(x):
    """2^x (fp32) with one element in four computed on the FMA pipe (Hopper only: inline PTX)."""
    return tl.inline_asm_elementwise(_ASM_C, _CONSTRAINTS_C, [x], dtype=tl.float32, is_pure=True, pack=4)
