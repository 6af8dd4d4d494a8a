"""A KV cache kept in the kernels' layout: per layer, K and V buffers of shape (batch, capacity, kv_heads, d).

transformers' DynamicCache grows by `torch.cat` (each decode step copies every layer's whole K/V) and holds
(batch, kv_heads, seq, d), which the fa3fp8 kernels, wanting (batch, seq, kv_heads, d), must transpose and copy
on every chunk. Here new states are written in place at the current length and attention gets
`buffer[:, :length].transpose(1, 2)`: a view, which is contiguous again in the kernels' layout for batch 1.

Buffers grow by doubling up to the capacity rather than being allocated at full capacity: at 128K tokens of a
Llama-3.1-8B-shaped model the cache is 17 GB either way, but most documents are short, and a session for a
short one should not hold the long one's memory. Growing costs a few one-time copies (log2 of length / first
chunk).

Static mode (`PreallocatedCache.static`) serves decode steps captured as a CUDA graph: the buffers are reserved
up front, a new token's K/V go to the position held in a device tensor, and attention gets the whole reserved
buffer (the valid length comes from a device tensor too, `worker.llm.attention.static_decode`), so every step
runs the same kernels on the same memory.

Under `fa3_fp8`, each layer also owns an FP8 mirror of its K/V (`quantized_kv.QuantizedKVMirror`, made on the first
`quantized_kv` call), which prefill attention reads through `worker.llm.attention.quantized_prefill` so that a
chunk quantizes only the keys new since the last one. `crop` and `reset` truncate the mirror with the layer.
"""
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import Cache, CacheLayerMixin

from worker.llm.quantized_kv import QuantizedKVMirror


def _buffer_for(states: torch.Tensor) -> torch.Tensor:
    """An uninitialized (batch, tokens, heads, d) buffer with room for `states` (batch, heads, tokens, d)."""
    batch, heads, tokens, dim = states.shape
    return states.new_empty((batch, max(tokens, 1), heads, dim))


class PreallocatedLayer(CacheLayerMixin):
    """One attention layer's K/V in buffers (batch, allocated, kv_heads, d), `allocated` <= `capacity`.

    `keys` and `values` are the valid part as transformers shapes it, (batch, kv_heads, length, d): views of the
    buffers, refreshed on every `update` and `crop`. `quantized` is the FP8 mirror, None until `quantized_kv`.
    """

    is_sliding = False
    is_croppable = True

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None
        self.static_position: torch.Tensor | None = None
        self.quantized: QuantizedKVMirror | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate buffers for the states' batch, heads, head dims, dtype and device, with room for them."""
        self.device = key_states.device
        self.key_buffer = _buffer_for(key_states)
        self.value_buffer = _buffer_for(value_states)
        self.is_initialized = True
        self._refresh_views()

    @property
    def allocated(self) -> int:
        """Tokens the buffers hold room for now."""
        return self.key_buffer.shape[1] if self.key_buffer is not None else 0

    def _grow(self, tokens: int) -> None:
        """Reallocate the buffers to hold exactly `tokens` tokens, keeping the cached ones."""
        for name in ("key_buffer", "value_buffer"):
            old = getattr(self, name)
            new = old.new_empty((old.shape[0], tokens, *old.shape[2:]))
            new[:, : self.length] = old[:, : self.length]
            setattr(self, name, new)

    def reserve(self, tokens: int) -> None:
        """Make room for `tokens` tokens now (at most the capacity), so that no later update reallocates."""
        if not self.is_initialized:
            raise ValueError("reserve needs a layer that has seen states (prefill first)")
        if tokens > self.allocated:
            self._grow(min(tokens, self.capacity))
            self._refresh_views()

    def advance(self, tokens: int) -> None:
        """Count `tokens` more tokens as cached: static-mode updates write without moving the length."""
        if self.length + tokens > self.allocated:
            raise ValueError(f"tokens: {tokens} more would pass the {self.allocated} reserved")
        self.length += tokens
        self._refresh_views()

    def _refresh_views(self) -> None:
        self.keys = self.key_buffer[:, : self.length].transpose(1, 2)
        self.values = self.value_buffer[:, : self.length].transpose(1, 2)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (batch, kv_heads, new, d) states; return all cached states as views (batch, kv_heads, length, d)."""
        if self.static_position is not None:
            # one token at a device-held position; attention sees the whole reserved buffer
            self.key_buffer.index_copy_(1, self.static_position, key_states.transpose(1, 2))
            self.value_buffer.index_copy_(1, self.static_position, value_states.transpose(1, 2))
            return self.key_buffer.transpose(1, 2), self.value_buffer.transpose(1, 2)
        new = key_states.shape[-2]
        end = self.length + new
        if end > self.capacity:
            raise ValueError(
                f"key_states: {new} more tokens would make {end}, past the cache's capacity of {self.capacity}"
            )
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if end > self.allocated:
            self._grow(min(self.capacity, max(end, 2 * self.allocated)))
        self.key_buffer[:, self.length : end] = key_states.transpose(1, 2)
        self.value_buffer[:, self.length : end] = value_states.transpose(1, 2)
        self.length = end
        self._refresh_views()
        return self.keys, self.values

    def quantized_kv(self, v_permuted: bool | None = None):
        """The cached K/V in FP8 (a `fa3fp8.QuantizedKV`), from the layer's mirror: only the keys cached since the
        last call (from their block on) are quantized. One sequence (batch 1) with at least one token. `v_permuted`:
        the V order the mirror takes when first filled (`fa3fp8.v_permuted_for` the layer's attention)."""
        if self.length == 0:
            raise ValueError("quantized_kv needs cached tokens (prefill first)")
        if self.key_buffer.shape[0] != 1:
            raise ValueError(f"quantized_kv needs batch 1 (one sequence), got batch {self.key_buffer.shape[0]}")
        if self.quantized is None:
            self.quantized = QuantizedKVMirror(self.capacity)
        return self.quantized.update(
            self.key_buffer[0, : self.length], self.value_buffer[0, : self.length], v_permuted
        )

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv_length, kv_offset) of the mask for `query_length` new queries: all cached keys plus theirs."""
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        """Tokens cached."""
        return self.length

    def get_max_length(self) -> int:
        """Most tokens the layer can hold."""
        return self.capacity

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` tokens (a negative count, as transformers' layers take it)."""
        if tokens_to_remove > 0 or -tokens_to_remove > self.length:
            raise ValueError(
                f"tokens_to_remove must be a negative count of at most the {self.length} cached tokens, "
                f"got {tokens_to_remove}"
            )
        if tokens_to_remove == 0:
            return
        self.length += tokens_to_remove
        self._refresh_views()
        self._truncate_mirror()

    def reset(self) -> None:
        """Empty the layer, keeping its buffers (and its mirror's)."""
        if self.is_initialized:
            self.length = 0
            self._refresh_views()
            self._truncate_mirror()

    def _truncate_mirror(self) -> None:
        if self.quantized is not None:
            self.quantized.truncate(self.length)


class PreallocatedCache(Cache):
    """A Cache of `PreallocatedLayer`s, one per decoder layer, each holding up to `capacity` tokens."""

    def __init__(self, num_layers: int, capacity: int):
        if num_layers < 1:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        super().__init__(layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])

    def reserve(self, tokens: int) -> None:
        """Make room for `tokens` tokens in every layer (see `PreallocatedLayer.reserve`)."""
        for layer in self.layers:
            layer.reserve(tokens)

    def advance(self, tokens: int) -> None:
        """Count `tokens` more tokens as cached in every layer, after static-mode steps wrote them."""
        for layer in self.layers:
            layer.advance(tokens)

    @contextmanager
    def static(self, position: torch.Tensor) -> Iterator[None]:
        """Static mode: updates write one token at `position` (a (1,) int64 device tensor) and return the whole
        reserved buffers, without touching the lengths."""
        for layer in self.layers:
            layer.static_position = position
        try:
            yield
        finally:
            for layer in self.layers:
                layer.static_position = None


def holds_only_full_attention(config: PreTrainedConfig) -> bool:
    """Whether every decoder layer of the model is full attention (no sliding window, linear or shared layers)."""
    layer_types = getattr(config.get_text_config(decoder=True), "layer_types", None)
    return layer_types is None or all(layer_type == "full_attention" for layer_type in layer_types)


def new_cache(config: PreTrainedConfig, capacity: int) -> Cache:
    """An empty KV cache for a model with `config`, for sequences of up to `capacity` tokens.

    Full-attention models get a `PreallocatedCache`; others (sliding windows, linear attention) a DynamicCache,
    which knows their layer types.
    """
    if not holds_only_full_attention(config):
        return DynamicCache(config=config)
    return PreallocatedCache(config.get_text_config(decoder=True).num_hidden_layers, capacity)
