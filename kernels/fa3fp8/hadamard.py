"""Random-sign Hadamard rotation for FP8 "incoherent processing" (FlashAttention-3, section 3.3).

Q and K are both multiplied by R = diag(signs) · H / sqrt(d), which is orthogonal, so QKᵀ is unchanged while
outliers are spread over all d channels before quantization. H is Sylvester's: H_1 = [1], H_2n = [[H_n, H_n],
[H_n, -H_n]], so x · H_2n = [(x_1 + x_2) · H_n, (x_1 - x_2) · H_n] for x's halves x_1, x_2 (the quantizer's split).
"""

import functools

import torch

SEED = 0x5EED


@functools.lru_cache(maxsize=None)
def sylvester(d: int, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """Sylvester's (d, d) Hadamard matrix of ±1 entries (exact in bf16/fp16), cached per (d, dtype, device)."""
    if d < 1 or d & (d - 1):
        raise ValueError(f"head dim d must be a power of two for the Hadamard rotation, got {d}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h.to(dtype=dtype, device=device)


@functools.lru_cache(maxsize=None)
def signs(d: int, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """The rotation's d random ±1 signs (fixed per d), cached per (d, dtype, device)."""
    gen = torch.Generator().manual_seed(SEED + d)
    return (torch.randint(0, 2, (d,), generator=gen, dtype=torch.int64) * 2 - 1).to(dtype=dtype, device=device)


@functools.lru_cache(maxsize=None)
def sign_hadamard(d: int, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """diag(signs) · H as a (d, d) matrix of ±1 entries (exact in bf16/fp16); divide the product by sqrt(d).
    Cached per (d, dtype, device): no host-to-device copy after the first call."""
    return (signs(d)[:, None] * sylvester(d)).to(dtype=dtype, device=device)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """x · R along the last dim in float64, with R = diag(signs) · H / sqrt(d) orthogonal."""
    d = x.shape[-1]
    return x.to(torch.float64) @ sign_hadamard(d, device=str(x.device)) / d**0.5
