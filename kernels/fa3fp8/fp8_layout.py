"""The quantized Q/K/V bundle that the FP8 kernel reads, its Q and K/V parts, and its per-block scale bookkeeping."""

from dataclasses import dataclass

import torch

E4M3_MAX = 448.0


def pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """The smallest power of two s with amax / s <= E4M3_MAX, from the bits of fp32 amax > 0 (exact).

    V's scales are such powers: the CUDA kernel keeps O in units of the largest V scale it reads and multiplies
    each tile's P by vs / v_max, which is then a shift of P's exponent and rounds P exactly as the unscaled P.
    """
    bits = amax.to(torch.float32).view(torch.int32)
    exponent = (bits >> 23) - 8 + ((bits & 0x7FFFFF) > 0x600000).to(torch.int32)  # 448 = 1.75 · 2^8
    return (exponent << 23).view(torch.float32)


def v_key_positions(n: torch.Tensor) -> torch.Tensor:
    """Where key n of a tile is stored in a key-permuted V (`QuantizedQKV.v_permuted`), for int tensors n.

    Within each 32-key group, key 16h + 8c + 2t + j (h, c, j in {0, 1}, t in 0..3) moves to 16h + 4t + 2c + j: the
    order in which the CUDA kernel's thread t of a quad holds P after Q·Kᵀ (keys 2t, 2t+1, 8+2t, 9+2t of each half
    group) is the order wgmma reads P·V's A operand in (k-positions 4t..4t+3), so P needs no exchange between lanes.
    """
    return (n & ~15) | ((n >> 1) & 3) << 2 | ((n >> 3) & 1) << 1 | (n & 1)


def permute_v_keys(v8t: torch.Tensor) -> torch.Tensor:
    """A tile-by-tile transposed V (..., n_blocks * block) with its keys (last dim) moved to `v_key_positions`."""
    n = torch.arange(v8t.shape[-1], device=v8t.device)
    out = torch.empty_like(v8t)
    out[..., v_key_positions(n)] = v8t
    return out


def unpermute_v_keys(v8t: torch.Tensor) -> torch.Tensor:
    """Inverse of `permute_v_keys`."""
    return v8t[..., v_key_positions(torch.arange(v8t.shape[-1], device=v8t.device))]


def tile_bound(total: int, block: int, batch: int) -> int:
    """An upper bound of the `block`-row tiles of `batch` sequences of `total` rows in all, known on the host."""
    return -(-total // block) + batch


def block_offsets(cu_seqlens: torch.Tensor, total: int, block: int) -> tuple[torch.Tensor, int]:
    """Cumulative count of `block`-row tiles per sequence (int32, length batch+1) and `tile_bound`.

    Computed on the device without a host sync.
    """
    lens = cu_seqlens[1:] - cu_seqlens[:-1]
    offsets = torch.zeros_like(cu_seqlens)
    offsets[1:] = torch.cumsum((lens + block - 1) // block, 0)
    return offsets.to(torch.int32), tile_bound(total, block, cu_seqlens.shape[0] - 1)


@dataclass
class QuantizedQKV:
    """FP8 (e4m3) Q, K, V with one fp32 scale per (head, tile of rows), ready for `flash_attn_fp8_func`.

    q8 `(total_q, heads, d)`, k8 `(total_k, kv_heads, d)`, q_scale `(heads, n_blocks_q)`, k_scale / v_scale
    `(kv_heads, n_blocks_k)`, v_scale powers of two (`pow2_scale`); tile t of sequence b has scale index
    cu_blocks[b] + t. v8t `(kv_heads, d,
    n_blocks_k * block_n)` is V transposed (K-major for the PV product), tile by tile: tile t of sequence b fills
    columns (cu_blocks_k[b] + t) * block_n onwards, zero-padded, so every tile starts 16-byte aligned for TMA.
    n_blocks may exceed the tiles in use (cu_blocks[-1]): quantize_qkv allocates an upper bound, a quantized KV
    cache its room to grow; the kernels read no tile past cu_blocks[-1], and those entries are unset.
    `batch_shape` is `(batch, seqlen_q)` for dense input (the output is reshaped back), None for packed input;
    dense input's cu_seqlens_q / cu_seqlens_k are shared by every call of that shape: read them, never write them.
    `v_permuted`: v8t's keys are in the CUDA kernel's order (`v_key_positions`), which only that kernel reads;
    quantize_qkv writes them so where that kernel serves FP8 at this head dim.
    """

    q8: torch.Tensor
    k8: torch.Tensor
    v8t: torch.Tensor
    q_scale: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    cu_blocks_q: torch.Tensor
    cu_blocks_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    block_m: int
    block_n: int
    hadamard: bool
    out_dtype: torch.dtype
    batch_shape: tuple[int, int] | None
    v_permuted: bool = False


@dataclass
class QuantizedQ:
    """Q's part of a QuantizedQKV (`quantize_q`): q8, q_scale, cu_seqlens_q, cu_blocks_q, max_seqlen_q and block_m
    as there, with `hadamard` (Q rotated), `out_dtype` (Q's dtype, the output's) and `batch_shape` (the dense
    input's (batch, seqlen_q), None for packed input)."""

    q8: torch.Tensor
    q_scale: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_blocks_q: torch.Tensor
    max_seqlen_q: int
    block_m: int
    hadamard: bool
    out_dtype: torch.dtype
    batch_shape: tuple[int, int] | None


@dataclass
class QuantizedKV:
    """K and V's part of a QuantizedQKV (`quantize_kv`, or a cache that keeps its K/V quantized): k8, v8t, k_scale,
    v_scale, cu_seqlens_k, cu_blocks_k, max_seqlen_k, block_n and v_permuted as there, with `hadamard` (K rotated;
    Q must be rotated alike)."""

    k8: torch.Tensor
    v8t: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    cu_seqlens_k: torch.Tensor
    cu_blocks_k: torch.Tensor
    max_seqlen_k: int
    block_n: int
    hadamard: bool
    v_permuted: bool
