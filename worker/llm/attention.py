"""fa3fp8 as transformers attention implementations (`fa3_bf16`, `fa3_fp8`).

transformers calls an attention function with query (batch, heads, seq_q, d) and key/value
(batch, kv_heads, seq_k, d) from the KV cache; fa3fp8 wants (batch, seq, heads, d). Packed batches arrive
as one row with `cu_seq_lens_q/k` and `max_length_q/k` kwargs and go to the varlen kernel. Padding is never
used (short documents are packed instead): the mask hook is transformers' flash-attention one, which passes
no mask for unpadded input and the 2D padding mask otherwise, so padded input is refused, not silently
attended. For the same reason a layer's sliding window reaches attention only as its `sliding_window` kwarg, which
becomes fa3fp8's `window_size` (the decode paths that take no window read only the window's keys); logit
soft-capping, attention sinks and other masked layer kinds (chunked attention), which fa3fp8 does not compute, are
refused (`fa3_unsupported`: the runtime then takes sdpa or eager).

FP8 prefill chunks over the session's cache (`quantized_prefill`) that follow cached keys quantize only their
queries and the keys new since the last chunk: the cached K/V come quantized from the cache layer's FP8 mirror
(`kv_cache`, `quantized_kv`), found through `module.layer_idx`. A chunk with nothing cached before it (a one-pass
prefill, a document's first chunk) has nothing to reuse and builds no mirror (8.6 GB at 128K tokens of an 8B
model); it and forwards without that context (packed rows, decode steps) quantize the Q, K and V they are handed.
"""
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from worker.llm.kv_cache import PreallocatedCache

FA3_IMPLEMENTATIONS = ("fa3_bf16", "fa3_fp8")
ATTENTION_IMPLEMENTATIONS = ("sdpa", *FA3_IMPLEMENTATIONS)

DecodeAttention = Literal["split", "kernel", "sdpa", "matmul"]
DECODE_ATTENTION = get_args(DecodeAttention)
_decode_attention: DecodeAttention = "split"


def decode_attention() -> DecodeAttention:
    """What serves single-token (decode) queries under the fa3 implementations now."""
    return _decode_attention


def set_decode_attention(choice: DecodeAttention) -> None:
    """Choose what serves single-token (decode) queries under the fa3 implementations."""
    global _decode_attention
    if choice not in DECODE_ATTENTION:
        raise ValueError(f"decode_attention must be one of {DECODE_ATTENTION}, got {choice!r}")
    _decode_attention = choice


def window_size(sliding_window: int | None) -> tuple[int, int]:
    """fa3fp8's window for transformers' `sliding_window` w (query at position p sees keys after p - w, and under
    no causal mask before p + w, as transformers' flash-attention path passes it); (-1, -1) for None."""
    if sliding_window is None:
        return (-1, -1)
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window must be a positive int or None, got {sliding_window!r}")
    return (sliding_window - 1, sliding_window - 1)


# Layer types (transformers' config.layer_types) whose attention fa3 computes: causal, with the sliding window
# passed as an argument; or layers that do not call the attention function. The others mask in ways the fa3 mask hook
# drops (chunked, non-overlapping windows, sparse indexers, and kinds unknown here), so they would attend everything.
FA3_LAYER_TYPES = frozenset({
    "full_attention", "sliding_attention", "linear_attention", "conv", "moe", "hybrid", "sparse", "dense",
})


def fa3_unsupported(model: torch.nn.Module) -> list[str]:
    """What of `model`'s attention fa3fp8 does not compute (an fa3 implementation would give wrong outputs): logit
    soft-capping, attention sinks, and layer types outside FA3_LAYER_TYPES."""
    config = model.config.get_text_config(decoder=True)
    missing = []
    if getattr(config, "attn_logit_softcapping", None):
        missing.append("logit soft-capping (attn_logit_softcapping)")
    other_layers = sorted(set(getattr(config, "layer_types", None) or ()) - FA3_LAYER_TYPES)
    if other_layers:
        missing.append(f"{', '.join(other_layers)} layers")
    if any(name.rsplit(".", 1)[-1] == "sinks" for name, _ in model.named_parameters()):
        missing.append("attention sinks")
    return missing


def _decode_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None) -> torch.Tensor:
    out = F.scaled_dot_product_attention(query, key, value, scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2)


def _decode_matmul(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None) -> torch.Tensor:
    # Two batched matmuls over the whole KV length, which the GEMMs split across the GPU (the split-KV idea of
    # flash-decoding), instead of one thread block per head walking all keys; the query heads of each KV head
    # are rows of one product, so K and V are read once.
    batch, heads, _, dim = query.shape
    rows = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)
    scores = torch.matmul(rows, key.transpose(2, 3)).float() * (scaling if scaling is not None else dim**-0.5)
    out = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2)


_static_seqlens: torch.Tensor | None = None


@contextmanager
def static_decode(seqlens: torch.Tensor) -> Iterator[None]:
    """While active, split decode reads each sequence's valid key count from `seqlens` ((batch,) int32 on the
    device) instead of the key length: the cache hands attention its whole reserved buffer (static mode), so that
    a decode step can be captured once as a CUDA graph and replayed at every length."""
    global _static_seqlens
    _static_seqlens = seqlens
    try:
        yield
    finally:
        _static_seqlens = None


def _decode_split(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None,
                  window: tuple[int, int]) -> torch.Tensor:
    # The split-KV decode kernel reads the cache in its own (batch, seq, kv_heads, d) layout: with the session's
    # preallocated cache, key.transpose(1, 2) is a view of the cache buffer, so nothing is copied.
    import fa3fp8

    out = fa3fp8.flash_attn_decode_func(
        query[:, :, 0], key.transpose(1, 2), value.transpose(1, 2), cache_seqlens=_static_seqlens,
        softmax_scale=scaling, window_size=window,
    )
    return out.unsqueeze(1)


_DECODE_FUNCTIONS = {"sdpa": _decode_sdpa, "matmul": _decode_matmul}


def _decode(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None,
            window: tuple[int, int]) -> torch.Tensor:
    """One new token per sequence by the chosen decode path. The query is the newest position, so a window keeps
    the last left + 1 keys: the paths without a window of their own read only those (static mode, where the keys
    are the whole reserved buffer, is the split kernel's, which bounds them itself)."""
    if _decode_attention == "split":
        return _decode_split(query, key, value, scaling, window)
    if window[0] >= 0:
        key, value = key[:, :, -(window[0] + 1):], value[:, :, -(window[0] + 1):]
    return _DECODE_FUNCTIONS[_decode_attention](query, key, value, scaling)

_quantized_cache: PreallocatedCache | None = None


@contextmanager
def quantized_prefill(cache: Cache) -> Iterator[None]:
    """While active, `fa3_fp8` prefill chunks (several queries of one sequence, not packed, after cached keys) of
    layer i take the cached K/V in FP8 from `cache.layers[i].quantized_kv()`, so that each chunk quantizes its
    queries and only the keys new since the last chunk instead of the whole cache. `cache` must be the cache the
    forward updates; a cache other than a PreallocatedCache (a DynamicCache) keeps no FP8 mirror, and attention
    then quantizes the K/V it is handed, as without this context. Like `static_decode`, it holds one cache for the
    process."""
    global _quantized_cache
    _quantized_cache = cache if isinstance(cache, PreallocatedCache) else None
    try:
        yield
    finally:
        _quantized_cache = None


def _fp8_cached_prefill(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, scaling: float | None,
                        causal: bool, window: tuple[int, int]) -> torch.Tensor:
    import fa3fp8

    layer = _quantized_cache.layers[module.layer_idx]
    # the mirror quantizes the layer's own buffers: they must be the keys attention was handed
    if key.shape[2] != layer.get_seq_length() or key.data_ptr() != layer.key_buffer.data_ptr():
        raise ValueError(
            f"key is not the cached keys of layer {module.layer_idx} of the quantized_prefill cache: that cache must "
            "be the one the forward updates"
        )
    # the mirror keeps V in the order this layer's attention reads (a sliding window's kernel may read another)
    kv = layer.quantized_kv(v_permuted=fa3fp8.v_permuted_for(key, causal, window))
    qkv = fa3fp8.assemble_qkv(fa3fp8.quantize_q(query.transpose(1, 2)), kv)
    return fa3fp8.flash_attn_fp8_func(qkv, causal=causal, softmax_scale=scaling, window_size=window)


def _fa3_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    fp8: bool,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    import fa3fp8

    if attention_mask is not None:
        raise ValueError("fa3 attention takes no attention_mask: pack sequences with cu_seq_lens instead of padding")
    if dropout:
        raise ValueError("fa3 attention is inference-only: dropout must be 0")
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"fa3 attention computes no {name} (logit soft-capping / attention sinks): use sdpa or eager"
            )
    window = window_size(kwargs.get("sliding_window"))
    causal = kwargs.get("is_causal") if kwargs.get("is_causal") is not None else getattr(module, "is_causal", True)
    cu_seq_lens_q = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens_q is not None:
        if query.shape[0] != 1:
            raise ValueError("packed attention needs batch size 1 (all sequences in one row)")
        cu_seq_lens_k = kwargs.get("cu_seq_lens_k", cu_seq_lens_q)
        out = fa3fp8.flash_attn_varlen_func(
            query[0].transpose(0, 1),
            key[0].transpose(0, 1),
            value[0].transpose(0, 1),
            cu_seq_lens_q.to(torch.int32),
            cu_seq_lens_k.to(torch.int32),
            int(kwargs["max_length_q"]),
            int(kwargs.get("max_length_k", kwargs["max_length_q"])),
            softmax_scale=scaling,
            causal=causal,
            fp8=fp8,
            window_size=window,
        )
        return out.unsqueeze(0), None
    if query.shape[2] == 1 and _decode_attention != "kernel":
        return _decode(query, key, value, scaling, window), None
    if fp8 and _quantized_cache is not None and query.shape[0] == 1 and 1 < query.shape[2] < key.shape[2]:
        return _fp8_cached_prefill(module, query, key, scaling, causal, window), None
    out = fa3fp8.flash_attn_func(
        query.transpose(1, 2),
        key.transpose(1, 2),
        value.transpose(1, 2),
        softmax_scale=scaling,
        causal=causal,
        fp8=fp8,
        window_size=window,
    )
    return out, None


def fa3_bf16_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function running fa3fp8 in BF16."""
    return _fa3_forward(module, query, key, value, attention_mask, scaling, dropout, fp8=False, **kwargs)


def fa3_fp8_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function running fa3fp8 with FP8 Q/K/V."""
    return _fa3_forward(module, query, key, value, attention_mask, scaling, dropout, fp8=True, **kwargs)


def register_fa3_attention() -> None:
    """Register `fa3_bf16` and `fa3_fp8` with transformers' AttentionInterface (idempotent)."""
    AttentionInterface.register("fa3_bf16", fa3_bf16_attention)
    AttentionInterface.register("fa3_fp8", fa3_fp8_attention)
    for name in FA3_IMPLEMENTATIONS:
        AttentionMaskInterface.register(name, flash_attention_mask)
