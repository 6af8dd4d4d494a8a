"""fastmath.exp2_mixed: the polynomial's accuracy (its math replayed in float32 on the CPU), the PTX assembling for
sm_90 without a GPU, and the real instruction sequence on a Hopper GPU."""

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fa3fp8.fastmath import POLY, exp2_mixed

ROUNDER = 12582912.0  # 1.5 * 2**23: adding it rounds a float32 to an integer held in the low mantissa bits


def exp2_poly_emulated(x: torch.Tensor) -> torch.Tensor:
    """The FMA-pipe branch of exp2_mixed, step by step in float32."""
    t = x + ROUNDER
    r = t - ROUNDER
    f = x - r
    c0, c1, c2, c3 = (torch.tensor(c, dtype=torch.float32) for c in POLY)
    p = ((c3 * f + c2) * f + c1) * f + c0
    bits = p.view(torch.int32) + r.nan_to_num(0.0).clamp(-127, 127).to(torch.int32) * (1 << 23)
    return torch.where(x < -126.0, torch.zeros_like(x), bits.view(torch.float32))


def test_polynomial_relative_error_is_below_bf16_rounding():
    x = torch.cat([torch.linspace(-125.9, 8.0, 200_001), torch.rand(100_000) * -20.0]).float()
    ours = exp2_poly_emulated(x).double()
    exact = torch.exp2(x.double())
    assert ((ours - exact).abs() / exact).max().item() < 1e-4  # BF16 rounds P with relative error up to 3.9e-3


def test_masked_scores_give_exact_zeros():
    x = torch.tensor([float("-inf"), -1e30, -126.5, -200.0])
    assert torch.equal(exp2_poly_emulated(x), torch.zeros(4))


@triton.jit
def _exp2_mixed_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, exp2_mixed(tl.load(X + offs)))


def test_ptx_assembles_for_hopper():
    source = ASTSource(_exp2_mixed_kernel, {"X": "*fp32", "Y": "*fp32", "N": "constexpr"}, {"N": 1024})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    # three exponentials in four on the SFU, the fourth on the FMA pipe
    assert ptx.count("ex2.approx.ftz.f32") == 3 * ptx.count("shl.b32")
    assert "fma.rn.f32" in ptx


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_matches_exp2_on_gpu():
    x = torch.cat([torch.linspace(-130.0, 8.0, (1 << 20) - 1024), torch.tensor([float("-inf")] * 1024)]).cuda()
    y = torch.empty_like(x)
    for start in range(0, x.numel(), 1 << 14):
        _exp2_mixed_kernel[(1,)](x[start:], y[start:], N=1 << 14)
    exact = torch.exp2(x.double())
    normal = x > -125.0
    assert ((y.double() - exact).abs() / exact)[normal].max().item() < 1e-4
    assert (y[x < -126.0] == 0).all()
