"""fa3fp8: FlashAttention-3-style attention kernels (BF16 and FP8) for Hopper, in Triton (FP8 also in CUDA C++).

Public API: `flash_attn_func`, `flash_attn_varlen_func`, `quantize_qkv`, `flash_attn_fp8_func`,
`flash_attn_decode_func`; `quantize_q`, `quantize_kv` and `assemble_qkv` quantize Q and K/V apart (a KV cache that
keeps its keys quantized) and join them into `quantize_qkv`'s bundle; `v_permuted_for` names the V order such a
cache should keep.
On CPUs and non-Hopper GPUs the pure-PyTorch reference (`fa3fp8.reference`) serves.
"""

from .fp8_layout import QuantizedKV, QuantizedQ, QuantizedQKV
from .ops import (
    assemble_qkv,
    flash_attn_decode_func,
    flash_attn_fp8_func,
    flash_attn_func,
    flash_attn_varlen_func,
    quantize_kv,
    quantize_q,
    quantize_qkv,
    v_permuted_for,
)

__all__ = [
    "QuantizedKV",
    "QuantizedQ",
    "QuantizedQKV",
    "assemble_qkv",
    "flash_attn_decode_func",
    "flash_attn_fp8_func",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "quantize_kv",
    "quantize_q",
    "quantize_qkv",
    "v_permuted_for",
]
