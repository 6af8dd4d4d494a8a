"""fa3fp8: FlashAttention-3-style attention kernels (BF16 and FP8) for Hopper, in Triton (FP8 also in CUDA C++).

Public API: `flash_attn_func`, `flash_attn_varlen_func`, `quantize_qkv`, `flash_attn_fp8_func`,
`flash_attn_decode_func`.
On CPUs and non-Hopper GPUs the pure-PyTorch reference (`fa3fp8.reference`) serves.
"""

from .fp8_layout import QuantizedQKV
from .ops import (
    flash_attn_decode_func,
    flash_attn_fp8_func,
    flash_attn_func,
    flash_attn_varlen_func,
    quantize_qkv,
)

__all__ = [
    "QuantizedQKV",
    "flash_attn_decode_func",
    "flash_attn_fp8_func",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "quantize_qkv",
]
