"""Random-sign Hadamard rotation for FP8 "incoherent processing" (FlashAttention-3, section 3.3).

Q and K are both multiplied by R = diag(signs) · H / sqrt(d), which is orthogonal, so QKᵀ is unchanged while
outliers are spread over all d channels before quantization.
"""

import functools

import torch

SEED = 0x5EED


@functools.lru_cache(maxsize=None)
def _sylvester(d: int) -> torch.Tensor:
    if d < 1 or d & (d - 1):
        raise ValueError(f"head dim d must be a power of two for the Hadamard rotation, got {d}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@functools.lru_cache(maxsize=None)
def _signs(d: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(SEED + d)
    return torch.randint(0, 2, (d,), generator=gen, dtype=torch.int64).to(torch.float64) * 2 - 1


@functools.lru_cache(maxsize=None)
def sign_hadamard(d: int, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """diag(signs) · H as a (d, d) matrix of ±1 entries (exact in bf16/fp16); divide the product by sqrt(d).
    Cached per (d, dtype, device): no host-to-device copy after the first call."""
    return (_signs(d)[:, None] * _sylvester(d)).to(dtype=dtype, device=device)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """x · R along the last dim in float64, with R = diag(signs) · H / sqrt(d) orthogonal."""
    d = x.shape[-1]
    return x.to(torch.float64) @ sign_hadamard(d, device=str(x.device)) / d**0.5
