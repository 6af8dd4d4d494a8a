"""Public attention functions: input validation, torch.library custom ops (with fake kernels for
torch.compile) and the choice between the Triton kernels and the PyTorch reference."""

import collections
import functools
import math
import numbers
import sys
import weakref

import torch

from . import env
from .configs import fp8_blocks
from .fp8_layout import (
    QuantizedKV,
    QuantizedQ,
    QuantizedQKV,
    block_offsets,
    permute_v_keys,
    tile_bound,
    unpermute_v_keys,
)
from .gpu import is_hopper
from .reference import (
    NO_WINDOW,
    attention_decode_reference,
    attention_fp8_reference,
    attention_varlen_reference,
    quantize_kv_reference,
    quantize_reference,
)

HEAD_DIMS = (64, 128, 256)
DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def _is_hopper(device_index: int) -> bool:
    """Asked once per device: torch's capability query took 13 us a call under cProfile on the H200 machine, and
    quantize_qkv asks for every part it launches."""
    return is_hopper(torch.cuda.get_device_capability(device_index))


def _use_triton(t: torch.Tensor) -> bool:
    choice = env.backend()
    if choice != "auto":
        return choice == "triton"
    if env.interpreting():
        return True
    return t.is_cuda and _is_hopper(t.device.index)


def _window_v_permuted(q: torch.Tensor, causal: bool, window: tuple[int, int]) -> bool | None:
    """The V key order that FP8 attention in this window reads: None without a window (the bundle's own order
    serves); True where the CUDA kernel serves it (causal windows where attention_sm90.serves_windows), which reads V
    key-permuted; False for the Triton kernel, which reads V's keys in order."""
    if window == NO_WINDOW:
        return None
    if not causal or not _use_triton(q) or env.interpreting():
        return False
    from . import attention_sm90

    return attention_sm90.serves_windows(q.shape[-1])


def _cuda_serves_fp8(q: torch.Tensor, block_m: int, block_n: int) -> bool:
    """True when the FP8 attention on this bundle will run the CUDA kernel, which reads V key-permuted: the choice
    is made when quantizing, as the two kernels read different V layouts."""
    if not _use_triton(q) or env.interpreting():
        return False
    from . import attention_sm90

    return attention_sm90.serves_fp8(q.shape[-1], block_m, block_n)


# ------------------------------------------------------------------------------------ implementations


def _attn_varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                      window_left=-1, window_right=-1):
    window = (window_left, window_right)
    if _use_triton(q):
        from .attention import attention_fwd

        out, lse, _ = attention_fwd(
            q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            softmax_scale, causal, max_seqlen_k=max_seqlen_k, window_size=window,
        )
        return out, lse
    out, lse = attention_varlen_reference(
        q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size=window
    )
    return out.to(q.dtype), lse.to(torch.float32)


def _quantize_q_impl(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard):
    if _use_triton(q):
        from .quantize import quantize_blocks

        return quantize_blocks(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard)
    q8, q_scale = quantize_reference(q, cu_seqlens_q, block_m, hadamard)
    return q8, q_scale, block_offsets(cu_seqlens_q, q.shape[0], block_m)[0]


def _quantize_kv_impl(k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v):
    if _use_triton(k):
        from .quantize import quantize_qkv_blocks

        _, (k8, k_scale, cu_blocks_k), (v8t, v_scale, _) = quantize_qkv_blocks(
            None, k, v, None, cu_seqlens_k, None, max_seqlen_k, None, block_n, hadamard, permute_v
        )
        return k8, v8t, k_scale, v_scale, cu_blocks_k
    k8, v8t, k_scale, v_scale = quantize_kv_reference(k, v, cu_seqlens_k, block_n, hadamard)
    v8t = permute_v_keys(v8t) if permute_v else v8t
    return k8, v8t, k_scale, v_scale, block_offsets(cu_seqlens_k, k.shape[0], block_n)[0]


def _quantize_qkv_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard,
                       permute_v):
    if _use_triton(q):
        from .quantize import quantize_qkv_blocks

        (q8, q_scale, cu_blocks_q), (k8, k_scale, cu_blocks_k), (v8t, v_scale, _) = quantize_qkv_blocks(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard, permute_v
        )
        return q8, k8, v8t, q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k
    q8, q_scale, cu_blocks_q = _quantize_q_impl(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard)
    k8, v8t, k_scale, v_scale, cu_blocks_k = _quantize_kv_impl(
        k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v
    )
    return q8, k8, v8t, q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k


def _attn_fp8_impl(q8, k8, v8t, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
                   max_seqlen_q, max_seqlen_k, block_m, block_n, softmax_scale, causal, out_dtype, v_permuted,
                   window_left=-1, window_right=-1):
    window = (window_left, window_right)
    if _use_triton(q8):
        from .attention import attention_fwd

        if _window_v_permuted(q8, causal, window) not in (None, v_permuted):
            v8t, v_permuted = (permute_v_keys if not v_permuted else unpermute_v_keys)(v8t), not v_permuted
        out, lse, _ = attention_fwd(
            q8, k8, v8t, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
            q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k, out_dtype, v_permuted=v_permuted,
            max_seqlen_k=max_seqlen_k, window_size=window,
        )
        return out, lse
    qkv = QuantizedQKV(
        q8, k8, v8t, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
        max_seqlen_q, max_seqlen_k, block_m, block_n, True, out_dtype, None, v_permuted,
    )
    out, lse = attention_fp8_reference(qkv, softmax_scale, causal, window_size=window)
    return out.to(out_dtype), lse.to(torch.float32)


def _attn_decode_impl(q, k_cache, v_cache, cache_seqlens, softmax_scale, window_left=-1):
    if _use_triton(q):
        from .decode import decode_fwd

        return decode_fwd(q, k_cache, v_cache, cache_seqlens, softmax_scale, window_left)
    out, lse = attention_decode_reference(
        q, k_cache, v_cache, cache_seqlens, softmax_scale, window_size=(window_left, -1)
    )
    return out.to(q.dtype), lse.to(torch.float32)


# ---------------------------------------------------------------------------------------------- custom ops


@torch.library.custom_op("fa3fp8::attn_varlen", mutates_args=())
def _attn_varlen_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int, window_right: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _attn_varlen_impl(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
        window_right,
    )


@_attn_varlen_op.register_fake
def _attn_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                      window_left, window_right):
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("fa3fp8::quantize_qkv", mutates_args=())
def _quantize_qkv_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int, max_seqlen_k: int, block_m: int, block_n: int, hadamard: bool, permute_v: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
           torch.Tensor]:
    return _quantize_qkv_impl(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard, permute_v
    )


@_quantize_qkv_op.register_fake
def _quantize_qkv_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard,
                       permute_v):
    q8, q_scale, cu_blocks_q = _quantize_q_fake(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard)
    k8, v8t, k_scale, v_scale, cu_blocks_k = _quantize_kv_fake(
        k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v
    )
    return q8, k8, v8t, q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k


@torch.library.custom_op("fa3fp8::quantize_q", mutates_args=())
def _quantize_q_op(
    q: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int, block_m: int, hadamard: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _quantize_q_impl(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard)


@_quantize_q_op.register_fake
def _quantize_q_fake(q, cu_seqlens_q, max_seqlen_q, block_m, hadamard):
    n_blocks = tile_bound(q.shape[0], block_m, cu_seqlens_q.shape[0] - 1)
    return (
        q.new_empty(q.shape, dtype=torch.float8_e4m3fn), q.new_empty((q.shape[1], n_blocks), dtype=torch.float32),
        torch.empty_like(cu_seqlens_q),
    )


@torch.library.custom_op("fa3fp8::quantize_kv", mutates_args=())
def _quantize_kv_op(
    k: torch.Tensor, v: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_k: int, block_n: int, hadamard: bool,
    permute_v: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _quantize_kv_impl(k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v)


@_quantize_kv_op.register_fake
def _quantize_kv_fake(k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v):
    n_blocks = tile_bound(k.shape[0], block_n, cu_seqlens_k.shape[0] - 1)
    kv_heads, d = k.shape[1], k.shape[2]
    e4m3 = torch.float8_e4m3fn
    return (
        k.new_empty(k.shape, dtype=e4m3), k.new_empty((kv_heads, d, n_blocks * block_n), dtype=e4m3),
        k.new_empty((kv_heads, n_blocks), dtype=torch.float32), k.new_empty((kv_heads, n_blocks), dtype=torch.float32),
        torch.empty_like(cu_seqlens_k),
    )


@torch.library.custom_op("fa3fp8::attn_fp8", mutates_args=())
def _attn_fp8_op(
    q8: torch.Tensor, k8: torch.Tensor, v8t: torch.Tensor, q_scale: torch.Tensor, k_scale: torch.Tensor,
    v_scale: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, cu_blocks_q: torch.Tensor,
    cu_blocks_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, block_m: int, block_n: int,
    softmax_scale: float, causal: bool, out_dtype: torch.dtype, v_permuted: bool, window_left: int,
    window_right: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _attn_fp8_impl(
        q8, k8, v8t, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
        max_seqlen_q, max_seqlen_k, block_m, block_n, softmax_scale, causal, out_dtype, v_permuted, window_left,
        window_right,
    )


@_attn_fp8_op.register_fake
def _attn_fp8_fake(q8, k8, v8t, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
                   max_seqlen_q, max_seqlen_k, block_m, block_n, softmax_scale, causal, out_dtype, v_permuted,
                   window_left, window_right):
    return q8.new_empty(q8.shape, dtype=out_dtype), q8.new_empty((q8.shape[1], q8.shape[0]), dtype=torch.float32)


@torch.library.custom_op("fa3fp8::attn_decode", mutates_args=())
def _attn_decode_op(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor | None,
    softmax_scale: float, window_left: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _attn_decode_impl(q, k_cache, v_cache, cache_seqlens, softmax_scale, window_left)


@_attn_decode_op.register_fake
def _attn_decode_fake(q, k_cache, v_cache, cache_seqlens, softmax_scale, window_left):
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(q.shape[:2], dtype=torch.float32)


def _op_or_impl(op, impl):
    """The custom op while torch.compile traces (it stays one opaque node), else the implementation itself:
    a custom op's Python dispatch costs about a millisecond per call, as much as a short attention."""
    return op if torch.compiler.is_compiling() else impl


# ---------------------------------------------------------------------------------------------- validation


def _check_tensors(named: tuple[tuple[str, torch.Tensor, str], ...]) -> None:
    """Each (name, tensor, layout) is a tensor of the layout's rank in the first one's 16-bit dtype on its device."""
    first_name, first = named[0][0], named[0][1]
    for name, t, layout in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != len(layout.split(",")):
            raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} must be bfloat16 or float16, got {t.dtype}")
        if t.dtype != first.dtype:
            raise ValueError(f"{name} must have {first_name}'s dtype {first.dtype}, got {t.dtype}")
        if t.device != first.device:
            raise ValueError(f"{name} must be on {first_name}'s device {first.device}, got {t.device}")


def _layout(packed: bool) -> str:
    return "(total, heads, d)" if packed else "(batch, seqlen, heads, d)"


def _check_head_dim(name: str, d: int) -> None:
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim {name}.shape[-1] must be one of {HEAD_DIMS}, got {d}")


def _check_same_shape(k, v) -> None:
    if k.shape != v.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")


def _check_kv(k, v, packed: bool) -> None:
    _check_tensors((("k", k, _layout(packed)), ("v", v, _layout(packed))))
    _check_head_dim("k", k.shape[-1])
    _check_same_shape(k, v)


def _check_qkv(q, k, v, packed: bool) -> None:
    layout = _layout(packed)
    _check_tensors((("q", q, layout), ("k", k, layout), ("v", v, layout)))
    d = q.shape[-1]
    _check_head_dim("q", d)
    _check_same_shape(k, v)
    if k.shape[-1] != d:
        raise ValueError(f"k head dim must equal q's ({d}), got {k.shape[-1]}")
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads (k.shape[-2] = {kv_heads}) must divide heads (q.shape[-2] = {heads})")
    if not packed and k.shape[0] != q.shape[0]:
        raise ValueError(f"k batch {k.shape[0]} must equal q batch {q.shape[0]}")


# (cu_seqlens' name, cu_seqlens, packed length, max_seqlen's name, max_seqlen) of one set of packed sequences
_Offsets = tuple[str, torch.Tensor, int, str, int]


def _check_offset_tensors(named: tuple[_Offsets, ...], device, device_of: str) -> None:
    for name, cu, _, _, _ in named:
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype != torch.int32:
            raise ValueError(f"{name} must be a 1-D int32 tensor")
        if cu.device != device:
            raise ValueError(f"{name} must be on {device_of}'s device {device}, got {cu.device}")
        if cu.shape[0] < 2:
            raise ValueError(f"{name} must hold batch + 1 >= 2 offsets, got {cu.shape[0]}")


class _CheckedOffsets:
    """Offsets tensors whose values passed the data-dependent checks, with the packed length and max_seqlen they
    passed for, until they change. Those checks cost a host sync (the GPU idles until the host launches again), and a
    packed forward pass hands every layer the same cu_seqlens. A tensor counts as unchanged while it is alive and its
    version counter (which torch's in-place ops move) is; inference tensors have none and are checked every call.
    Writes the counter does not see (a custom kernel's into the tensor's memory, `.data`'s) are not seen either."""

    def __init__(self, size: int = 4):
        self._entries = collections.deque(maxlen=size)  # (weak reference, (version, packed length, max_seqlen))

    def holds(self, cu: torch.Tensor, total: int, bound: int) -> bool:
        """Whether cu passed the checks for (total, bound) and has not changed since."""
        if cu.is_inference():
            return False
        key = (cu._version, total, bound)
        return any(ref() is cu and facts == key for ref, facts in self._entries)

    def add(self, cu: torch.Tensor, total: int, bound: int) -> None:
        """Remember that cu passed the checks for (total, bound)."""
        if not cu.is_inference():
            self._entries.append((weakref.ref(cu), (cu._version, total, bound)))


_checked_offsets = _CheckedOffsets()


def _offset_facts(offsets: list[torch.Tensor]) -> list[list[int]]:
    """(first, any decrease, last, longest sequence) of each offsets tensor, in one host sync."""
    return torch.stack([
        torch.stack([cu[0], (cu.diff() < 0).any().int(), cu[-1], cu.diff().max()]) for cu in offsets
    ]).tolist()


def _check_offset_values(named: tuple[_Offsets, ...]) -> None:
    for _, _, _, max_name, value in named:
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{max_name} must be a non-negative int, got {value!r}")
    if torch.compiler.is_compiling():
        return
    named = tuple(offsets for offsets in named if not _checked_offsets.holds(offsets[1], offsets[2], offsets[4]))
    if not named:
        return
    for (name, _, total, _, bound), (first, bad, last, longest) in zip(named, _offset_facts([o[1] for o in named])):
        if first != 0 or bad:
            raise ValueError(f"{name} must start at 0 and be non-decreasing")
        if last != total:
            raise ValueError(f"{name}[-1] = {last} must equal the packed length {total}")
        if longest > bound:
            raise ValueError(f"max_seqlen for {name} is {bound}, but a sequence has {longest} tokens")
    for _, cu, total, _, bound in named:
        _checked_offsets.add(cu, total, bound)


def _check_offsets(offsets: _Offsets, device, device_of: str) -> None:
    """One set of packed sequences on `device` (`device_of`'s)."""
    _check_offset_tensors((offsets,), device, device_of)
    _check_offset_values((offsets,))


def _check_cu_seqlens(cu_q, cu_k, total_q, total_k, max_seqlen_q, max_seqlen_k, device) -> None:
    named = (("cu_seqlens_q", cu_q, total_q, "max_seqlen_q", max_seqlen_q),
             ("cu_seqlens_k", cu_k, total_k, "max_seqlen_k", max_seqlen_k))
    _check_offset_tensors(named, device, "q")
    if cu_q.shape != cu_k.shape:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must have the same length, "
                         f"got {cu_q.shape[0]} and {cu_k.shape[0]}")
    _check_offset_values(named)


def _check_decode(q, k_cache, v_cache, cache_seqlens) -> None:
    cache_layout = "(batch, max_seqlen, kv_heads, d)"
    _check_tensors((("q", q, "(batch, heads, d)"), ("k_cache", k_cache, cache_layout),
                    ("v_cache", v_cache, cache_layout)))
    batch, heads, d = q.shape
    _check_head_dim("q", d)
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    if k_cache.shape[0] != batch:
        raise ValueError(f"k_cache batch {k_cache.shape[0]} must equal q batch {batch}")
    if k_cache.shape[-1] != d:
        raise ValueError(f"k_cache head dim must equal q's ({d}), got {k_cache.shape[-1]}")
    kv_heads = k_cache.shape[2]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads (k_cache.shape[2] = {kv_heads}) must divide heads (q.shape[1] = {heads})")
    if cache_seqlens is None:
        return
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32:
        raise ValueError("cache_seqlens must be an int32 tensor")
    if cache_seqlens.shape != (batch,):
        raise ValueError(f"cache_seqlens must have shape (batch,) = ({batch},), got {tuple(cache_seqlens.shape)}")
    if cache_seqlens.device != q.device:
        raise ValueError(f"cache_seqlens must be on q's device {q.device}, got {cache_seqlens.device}")


def _softmax_scale(softmax_scale, d: int) -> float:
    if softmax_scale is None:
        return d**-0.5
    real = isinstance(softmax_scale, numbers.Real) and not isinstance(softmax_scale, bool)
    if not real or not 0 < softmax_scale < math.inf:
        raise ValueError(f"softmax_scale must be a positive finite float, got {softmax_scale!r}")
    return float(softmax_scale)


def _window(window_size, causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> tuple[int, int]:
    """`window_size` checked and reduced to the bounds that hide a key of some sequence at most max_seqlen_q x
    max_seqlen_k long: a bound that hides none becomes -1 (so that attention without a window in effect keeps the
    fastest kernel), and so does the right one under `causal`, which already hides every key after the query's."""
    if type(window_size) is tuple and window_size == NO_WINDOW:  # the default: the checks below take ~1.8 us
        return NO_WINDOW
    valid = (
        isinstance(window_size, (tuple, list)) and len(window_size) == 2
        and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= -1 for x in window_size)
    )
    if not valid:
        raise ValueError(f"window_size must be a pair (left, right) of ints >= -1 (-1: unbounded), got {window_size!r}")
    left, right = int(window_size[0]), int(window_size[1])
    if left >= max_seqlen_k - 1:  # query i at key position i + seqlen_k - seqlen_q <= seqlen_k - 1
        left = -1
    if causal or right >= max_seqlen_q - 1:  # the first query, at seqlen_k - seqlen_q, is the most restricted
        right = -1
    return left, right


def _dense_cu_seqlens(batch: int, seqlen: int, device) -> torch.Tensor:
    """cu_seqlens of `batch` sequences of `seqlen` tokens, made once per (batch, seqlen, device) and shared read-only
    (made anew, the arange on the GPU cost ~20 us of host time per call on the H200, twice per dense attention or
    quantize_qkv call); anew while torch.compile traces or a CUDA graph captures, whose tensors must not outlive
    them."""
    device = torch.device(device)
    if torch.compiler.is_compiling() or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        return _arange_cu_seqlens(batch, seqlen, device)
    return _shared_cu_seqlens(batch, seqlen, device)


def _arange_cu_seqlens(batch: int, seqlen: int, device) -> torch.Tensor:
    if seqlen == 0:  # no tokens: an arange would need a step
        return torch.zeros(batch + 1, dtype=torch.int32, device=device)
    return torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device=device)[: batch + 1]


@functools.lru_cache(maxsize=256)
def _shared_cu_seqlens(batch: int, seqlen: int, device: torch.device) -> torch.Tensor:
    with torch.inference_mode(False):  # a normal tensor, usable in and out of inference mode
        cu = _arange_cu_seqlens(batch, seqlen, device)
    if device.type == "cuda":  # written before a call on any other stream reads it
        torch.cuda.current_stream(device).synchronize()
    return cu


def _as_packed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Dense (batch, seqlen, heads, d) as packed (batch * seqlen, heads, d), with its cu_seqlens and max_seqlen."""
    batch, seqlen = x.shape[:2]
    return x.reshape(batch * seqlen, *x.shape[2:]), _dense_cu_seqlens(batch, seqlen, x.device), seqlen


def _hadamard_flag(fp8: bool, hadamard) -> bool:
    if hadamard is not None and not fp8:
        raise ValueError("hadamard applies to the FP8 path only: pass fp8=True or leave hadamard=None")
    return True if hadamard is None else bool(hadamard)


class _NoBackward(torch.autograd.Function):
    """An attention call's outputs, passed through unchanged where autograd records a graph through its inputs:
    fa3fp8 computes the forward pass only, so a backward pass through them raises instead of leaving the inputs'
    gradients out (the kernels' outputs are not connected to them)."""

    @staticmethod
    def forward(ctx, out, lse, *inputs):
        return out.view_as(out), lse.view_as(lse)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("fa3fp8 computes attention forward only (no backward pass); for training use "
                           "torch.nn.functional.scaled_dot_product_attention")


def _forward_only(out, lse, *inputs):
    """out and lse, through _NoBackward where grad mode is on and an input requires grad (eager calls: a traced
    custom op without an autograd formula already refuses a backward pass)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs) and not torch.compiler.is_compiling():
        return _NoBackward.apply(out, lse, *inputs)
    return out, lse


# ---------------------------------------------------------------------------------------------- public API


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, fp8=False, hadamard=None, return_lse=False,
                    window_size=NO_WINDOW):
    """Attention forward, FlashAttention-3 style, on Hopper through Triton (elsewhere the PyTorch reference).

    Args:
        q: `(batch, seqlen_q, heads, d)`, bfloat16 or float16; d in {64, 128, 256}.
        k, v: `(batch, seqlen_k, kv_heads, d)`, q's dtype and device; kv_heads divides heads (GQA/MQA).
        softmax_scale: multiplies QKᵀ; default 1/sqrt(d).
        causal: mask aligned bottom-right (query i sees keys j <= i + seqlen_k - seqlen_q); rows that see no key
            give zeros.
        fp8: quantize Q, K, V to e4m3 inside (per-tile scales) and run the FP8 kernel.
        hadamard: with fp8, rotate Q and K by a random-sign Hadamard matrix first (default on).
        return_lse: also return the log-sum-exp of the scaled scores, `(batch, heads, seqlen_q)` fp32.
        window_size: (left, right) local attention, as FlashAttention's: query i, at key position
            i + seqlen_k - seqlen_q, sees keys from `left` before it to `right` after it (-1: unbounded; causal
            bounds the right side at 0). Transformers' `sliding_window` w is (w - 1, w - 1). Windows run the Triton
            kernel on Hopper (causal ones the CUDA kernel with FA3FP8_KERNEL=cuda).

    Returns:
        The output `(batch, seqlen_q, heads, d)` in q's dtype, and the LSE when `return_lse`. Forward only: where
        an input requires grad, a backward pass through them raises a RuntimeError.
    """
    _check_qkv(q, k, v, packed=False)
    batch, seqlen_q, heads, d = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    scale = _softmax_scale(softmax_scale, d)
    use_hadamard = _hadamard_flag(fp8, hadamard)
    window = _window(window_size, bool(causal), seqlen_q, seqlen_k)
    if fp8:
        qkv = quantize_qkv(q, k, v, hadamard=use_hadamard, permute_v=_window_v_permuted(q, bool(causal), window))
        out, lse = flash_attn_fp8_func(qkv, causal, scale, return_lse=True, window_size=window)
    else:
        out, lse = _op_or_impl(_attn_varlen_op, _attn_varlen_impl)(
            q.reshape(batch * seqlen_q, heads, d), k.reshape(batch * seqlen_k, kv_heads, d),
            v.reshape(batch * seqlen_k, kv_heads, d), _dense_cu_seqlens(batch, seqlen_q, q.device),
            _dense_cu_seqlens(batch, seqlen_k, q.device), seqlen_q, seqlen_k, scale, bool(causal), *window,
        )
        out, lse = out.view(batch, seqlen_q, heads, d), lse.view(heads, batch, seqlen_q).transpose(0, 1)
    out, lse = _forward_only(out, lse, q, k, v)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=False,
    fp8=False, hadamard=None, return_lse=False, window_size=NO_WINDOW,
):
    """Attention forward over packed sequences.

    Args:
        q: `(total_q, heads, d)`; k, v: `(total_k, kv_heads, d)`; bfloat16 or float16; d in {64, 128, 256}.
        cu_seqlens_q, cu_seqlens_k: int32 `(batch + 1,)` offsets of each sequence, starting at 0, non-decreasing,
            ending at total_q / total_k.
        max_seqlen_q, max_seqlen_k: the longest sequence lengths (ints, at least the real ones).
        softmax_scale, causal, fp8, hadamard, return_lse, window_size: as in `flash_attn_func`, per sequence.

    Returns:
        The output `(total_q, heads, d)` in q's dtype, and with `return_lse` the LSE `(heads, total_q)` fp32;
        forward only, as `flash_attn_func`.
    """
    _check_qkv(q, k, v, packed=True)
    _check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k, q.device)
    scale = _softmax_scale(softmax_scale, q.shape[-1])
    use_hadamard = _hadamard_flag(fp8, hadamard)
    window = _window(window_size, bool(causal), max_seqlen_q, max_seqlen_k)
    if fp8:
        qkv = quantize_qkv(
            q, k, v, use_hadamard, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            permute_v=_window_v_permuted(q, bool(causal), window), _checked=True,
        )
        out, lse = flash_attn_fp8_func(qkv, causal, scale, return_lse=True, window_size=window)
    else:
        out, lse = _op_or_impl(_attn_varlen_op, _attn_varlen_impl)(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, bool(causal), *window
        )
    out, lse = _forward_only(out, lse, q, k, v)
    return (out, lse) if return_lse else out


def quantize_qkv(
    q, k, v, hadamard=True, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
    *, permute_v=None, _checked=False,
) -> QuantizedQKV:
    """Quantize Q, K, V to FP8 e4m3 for `flash_attn_fp8_func`, one scale per (head, kernel tile of rows).

    Dense `(batch, seqlen, heads, d)` inputs, or packed `(total, heads, d)` ones with cu_seqlens and max_seqlen
    as in `flash_attn_varlen_func`. With `hadamard`, Q and K are rotated by the same random-sign Hadamard
    matrix (QKᵀ unchanged, outliers spread). V is stored transposed, tile by tile (see QuantizedQKV); `permute_v`
    as in `quantize_kv` (`flash_attn_func` passes the order of the kernel that will serve its window).
    """
    if permute_v is not None and not isinstance(permute_v, bool):
        raise ValueError(f"permute_v must be None or a bool, got {permute_v!r}")
    packed = cu_seqlens_q is not None
    if not _checked:
        _check_qkv(q, k, v, packed=packed)
        if packed:
            _check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k, q.device)
    batch_shape = None
    if not packed:
        batch_shape = tuple(q.shape[:2])
        q, cu_seqlens_q, max_seqlen_q = _as_packed(q)
        k, cu_seqlens_k, max_seqlen_k = _as_packed(k)
        v = v.reshape(k.shape)
    block_m, block_n = fp8_blocks(q.shape[-1])
    hadamard = bool(hadamard)
    if permute_v is None:
        permute_v = _cuda_serves_fp8(q, block_m, block_n)
    quantized = _op_or_impl(_quantize_qkv_op, _quantize_qkv_impl)(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard, permute_v
    )
    q8, k8, v8t, q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k = quantized
    return QuantizedQKV(
        q8, k8, v8t, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k,
        max_seqlen_q, max_seqlen_k, block_m, block_n, hadamard, q.dtype, batch_shape, permute_v,
    )


def quantize_q(q, hadamard=True, cu_seqlens_q=None, max_seqlen_q=None) -> QuantizedQ:
    """Quantize Q alone, as `quantize_qkv` does, for `assemble_qkv` with K and V quantized apart (`quantize_kv`).

    Dense `(batch, seqlen_q, heads, d)` input, or packed `(total_q, heads, d)` with cu_seqlens_q and max_seqlen_q
    as in `flash_attn_varlen_func`. `hadamard` must be K's.
    """
    packed = cu_seqlens_q is not None
    _check_tensors((("q", q, _layout(packed)),))
    _check_head_dim("q", q.shape[-1])
    batch_shape = None
    if packed:
        _check_offsets(("cu_seqlens_q", cu_seqlens_q, q.shape[0], "max_seqlen_q", max_seqlen_q), q.device, "q")
    else:
        batch_shape = tuple(q.shape[:2])
        q, cu_seqlens_q, max_seqlen_q = _as_packed(q)
    block_m = fp8_blocks(q.shape[-1])[0]
    hadamard = bool(hadamard)
    q8, q_scale, cu_blocks_q = _op_or_impl(_quantize_q_op, _quantize_q_impl)(
        q, cu_seqlens_q, max_seqlen_q, block_m, hadamard
    )
    return QuantizedQ(q8, q_scale, cu_seqlens_q, cu_blocks_q, max_seqlen_q, block_m, hadamard, q.dtype, batch_shape)


def quantize_kv(k, v, hadamard=True, cu_seqlens_k=None, max_seqlen_k=None, *, permute_v=None) -> QuantizedKV:
    """Quantize K and V alone, as `quantize_qkv` does, for `assemble_qkv`.

    Dense `(batch, seqlen_k, kv_heads, d)` input, or packed `(total_k, kv_heads, d)` with cu_seqlens_k and
    max_seqlen_k as in `flash_attn_varlen_func`. Each (kv head, block of block_n keys of a sequence) is quantized on
    its own, so keys [start, end) of a sequence, start a multiple of block_n, give exactly the whole sequence's
    blocks from start / block_n on: a KV cache can keep its complete blocks and quantize only the keys after them.
    `permute_v`: None picks V's key order as quantize_qkv does (for the kernel that will read it); a bool imposes
    it, so that parts added to earlier ones keep their layout.
    """
    packed = cu_seqlens_k is not None
    _check_kv(k, v, packed)
    if permute_v is not None and not isinstance(permute_v, bool):
        raise ValueError(f"permute_v must be None or a bool, got {permute_v!r}")
    if packed:
        _check_offsets(("cu_seqlens_k", cu_seqlens_k, k.shape[0], "max_seqlen_k", max_seqlen_k), k.device, "k")
    else:
        k, cu_seqlens_k, max_seqlen_k = _as_packed(k)
        v = v.reshape(k.shape)
    block_m, block_n = fp8_blocks(k.shape[-1])
    hadamard = bool(hadamard)
    if permute_v is None:
        permute_v = _cuda_serves_fp8(k, block_m, block_n)
    k8, v8t, k_scale, v_scale, cu_blocks_k = _op_or_impl(_quantize_kv_op, _quantize_kv_impl)(
        k, v, cu_seqlens_k, max_seqlen_k, block_n, hadamard, permute_v
    )
    return QuantizedKV(
        k8, v8t, k_scale, v_scale, cu_seqlens_k, cu_blocks_k, max_seqlen_k, block_n, hadamard, permute_v
    )


def v_permuted_for(k, causal=False, window_size=NO_WINDOW) -> bool:
    """The V key order (`QuantizedKV.v_permuted`) that FP8 attention with this mask reads from K/V like `k`, for
    K/V quantized once and read by many calls (a KV cache's FP8 mirror): with that order no call reorders V. A window
    is taken as it stands, whatever the lengths (a window wider than a call's keys serves either order)."""
    if not isinstance(k, torch.Tensor):
        raise ValueError(f"k must be a torch.Tensor, got {type(k).__name__}")
    _check_head_dim("k", k.shape[-1])
    window = _window(window_size, bool(causal), sys.maxsize, sys.maxsize)
    permuted = _window_v_permuted(k, bool(causal), window)
    if permuted is None:
        permuted = _cuda_serves_fp8(k, *fp8_blocks(k.shape[-1]))
    return permuted


def assemble_qkv(q: QuantizedQ, kv: QuantizedKV) -> QuantizedQKV:
    """The bundle for `flash_attn_fp8_func` of Q from `quantize_q` and K/V from `quantize_kv` (or a cache that keeps
    them quantized): the same as quantize_qkv's of the same inputs."""
    if not isinstance(q, QuantizedQ):
        raise ValueError(f"q must be a QuantizedQ from quantize_q, got {type(q).__name__}")
    if not isinstance(kv, QuantizedKV):
        raise ValueError(f"kv must be a QuantizedKV from quantize_kv, got {type(kv).__name__}")
    heads, d = q.q8.shape[-2:]
    kv_heads = kv.k8.shape[-2]
    if kv.k8.device != q.q8.device:
        raise ValueError(f"kv must be on q's device {q.q8.device}, got {kv.k8.device}")
    if kv.k8.shape[-1] != d:
        raise ValueError(f"kv head dim must equal q's ({d}), got {kv.k8.shape[-1]}")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads (kv.k8.shape[-2] = {kv_heads}) must divide heads (q.q8.shape[-2] = {heads})")
    if kv.cu_seqlens_k.shape != q.cu_seqlens_q.shape:
        raise ValueError(
            f"kv must hold q's {q.cu_seqlens_q.shape[0] - 1} sequences, got {kv.cu_seqlens_k.shape[0] - 1}"
        )
    if kv.hadamard != q.hadamard:
        raise ValueError(f"kv.hadamard must equal q.hadamard ({q.hadamard}): Q and K are rotated alike")
    if (q.block_m, kv.block_n) != fp8_blocks(d):
        raise ValueError(
            f"q.block_m and kv.block_n must be head dim {d}'s FP8 tiles {fp8_blocks(d)}, got {(q.block_m, kv.block_n)}"
        )
    return QuantizedQKV(
        q.q8, kv.k8, kv.v8t, q.q_scale, kv.k_scale, kv.v_scale, q.cu_seqlens_q, kv.cu_seqlens_k, q.cu_blocks_q,
        kv.cu_blocks_k, q.max_seqlen_q, kv.max_seqlen_k, q.block_m, kv.block_n, q.hadamard, q.out_dtype,
        q.batch_shape, kv.v_permuted,
    )


def flash_attn_fp8_func(qkv: QuantizedQKV, causal=False, softmax_scale=None, return_lse=False,
                        window_size=NO_WINDOW):
    """FP8 attention on a `quantize_qkv` or `assemble_qkv` bundle (the kernel alone, without the quantization pass).

    `window_size` as in `flash_attn_func` (a bundle whose V's key order is not the one the kernel serving the window
    reads is read through a reordered copy of V). Returns the output in the inputs' dtype,
    `(batch, seqlen_q, heads, d)` for dense bundles or `(total_q, heads, d)` for packed ones, and with
    `return_lse` the LSE `(batch, heads, seqlen_q)` / `(heads, total_q)` fp32.
    """
    if not isinstance(qkv, QuantizedQKV):
        raise ValueError(f"qkv must be a QuantizedQKV from quantize_qkv or assemble_qkv, got {type(qkv).__name__}")
    scale = _softmax_scale(softmax_scale, qkv.q8.shape[-1])
    window = _window(window_size, bool(causal), qkv.max_seqlen_q, qkv.max_seqlen_k)
    out, lse = _op_or_impl(_attn_fp8_op, _attn_fp8_impl)(
        qkv.q8, qkv.k8, qkv.v8t, qkv.q_scale, qkv.k_scale, qkv.v_scale, qkv.cu_seqlens_q, qkv.cu_seqlens_k,
        qkv.cu_blocks_q, qkv.cu_blocks_k, qkv.max_seqlen_q, qkv.max_seqlen_k, qkv.block_m, qkv.block_n,
        scale, bool(causal), qkv.out_dtype, qkv.v_permuted, *window,
    )
    if qkv.batch_shape is not None:
        batch, seqlen_q = qkv.batch_shape
        out = out.view(batch, seqlen_q, *out.shape[1:])
        lse = lse.view(lse.shape[0], batch, seqlen_q).transpose(0, 1)
    return (out, lse) if return_lse else out


def flash_attn_decode_func(q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, return_lse=False,
                           window_size=NO_WINDOW):
    """Decode attention: one new query token per sequence over its KV cache (split-KV flash-decoding on Hopper
    through Triton, elsewhere the PyTorch reference).

    Args:
        q: `(batch, heads, d)`, bfloat16 or float16; d in {64, 128, 256}. The query is the newest position, so
            every valid cached key is visible (no causal mask).
        k_cache, v_cache: `(batch, max_seqlen, kv_heads, d)`, q's dtype and device; kv_heads divides heads. Any
            strides (slices of a preallocated cache are read in place). The split count follows max_seqlen, so
            pass `cache[:, :longest]` rather than a mostly empty buffer.
        cache_seqlens: int32 `(batch,)` on q's device, valid keys per sequence (None: max_seqlen for all); values
            are clamped to [0, max_seqlen]. A sequence with 0 keys gives zeros and lse = -inf.
        softmax_scale: multiplies QKᵀ; default 1/sqrt(d).
        return_lse: also return the log-sum-exp of the scaled scores, `(batch, heads)` fp32.
        window_size: as in `flash_attn_func`; the query is the newest position, so only its left bound counts: the
            keys more than `left` before it are hidden.

    Returns:
        The output `(batch, heads, d)` in q's dtype, and the LSE when `return_lse`. No host synchronization on
        the Triton path (CUDA-graph safe). Forward only, as `flash_attn_func`.
    """
    _check_decode(q, k_cache, v_cache, cache_seqlens)
    scale = _softmax_scale(softmax_scale, q.shape[-1])
    window_left = _window(window_size, True, 1, k_cache.shape[1])[0]
    out, lse = _op_or_impl(_attn_decode_op, _attn_decode_impl)(
        q, k_cache, v_cache, cache_seqlens, scale, window_left
    )
    out, lse = _forward_only(out, lse, q, k_cache, v_cache)
    return (out, lse) if return_lse else out
