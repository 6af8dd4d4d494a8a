"""Greedy decode steps replayed from one CUDA graph.

A decode step of an 8B model at batch 1 is about a thousand small kernel launches through the transformers
forward: on the H200 that is ~25 ms of host time per token against ~7 ms of GPU work (docs/llm.md). Captured
once as a CUDA graph and replayed, the step costs one launch. Capture needs the same kernels on the same memory
at every step, so the step runs in static mode: the token, its position and the cache length live in device
tensors, the KV cache is reserved up front and written at the device-held position
(`PreallocatedCache.static`), and split decode reads the valid length from a device tensor
(`attention.static_decode`). Only the fa3 implementations with split decode run this way: their attention needs
no mask, which transformers would otherwise build from host-side lengths.
"""
import torch

from worker.llm.attention import FA3_IMPLEMENTATIONS, decode_attention, static_decode
from worker.llm.kv_cache import PreallocatedCache
from worker.llm.runtime import LLMRuntime

WARMUP_STEPS = 2  # eager runs on a side stream before capture (compiles kernels, settles allocations)
# capture costs about three eager steps and a replay saves two thirds of one (H200, 8B): below this many new
# tokens, eager decoding is as fast
MIN_GRAPH_TOKENS = 8


def supports_static_decode(runtime: LLMRuntime, cache) -> bool:
    """Whether decode steps of `runtime` over `cache` can run in static mode (and so be captured)."""
    return (
        runtime.attention_impl in FA3_IMPLEMENTATIONS
        and decode_attention() == "split"
        and isinstance(cache, PreallocatedCache)
    )


class StaticDecoder:
    """Decode steps for one stream whose cache holds `length` tokens, with room for `max_new_tokens` more.

    `step(token, position)` puts `token` at `position` (the stream's length) and returns the next position's
    logits (float32, a fresh tensor); it advances the cache's host-side length. With `graph`, the first step is
    run eagerly a few times and captured; later steps replay it.
    """

    def __init__(self, runtime: LLMRuntime, cache: PreallocatedCache, length: int, max_new_tokens: int,
                 graph: bool):
        if not supports_static_decode(runtime, cache):
            raise ValueError("static decode needs an fa3 attention implementation, split decode and a "
                             "PreallocatedCache")
        self.runtime = runtime
        self.cache = cache
        device = runtime.device
        self.ids = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.seqlens = torch.zeros((1,), dtype=torch.int32, device=device)
        with torch.inference_mode():  # the session's cache buffers are inference tensors
            cache.reserve(length + max_new_tokens)
        self.use_graph = graph
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def _forward(self) -> torch.Tensor:
        with self.cache.static(self.positions[0]), static_decode(self.seqlens):
            out = self.runtime.model(
                input_ids=self.ids, position_ids=self.positions, use_cache=True, logits_to_keep=1,
                **{self.runtime.cache_kwarg: self.cache},
            )
        return out.logits[0, -1]

    def _capture(self) -> None:
        side = torch.cuda.Stream(self.runtime.device)
        side.wait_stream(torch.cuda.current_stream(self.runtime.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._forward()
        torch.cuda.current_stream(self.runtime.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._forward()

    @torch.inference_mode()
    def step(self, token: int, position: int) -> torch.Tensor:
        """Put `token` at `position`; the logits of the position after it."""
        self.ids.fill_(token)
        self.positions.fill_(position)
        self.seqlens.fill_(position + 1)
        if not self.use_graph:
            logits = self._forward()
        else:
            if self.graph is None:
                self._capture()  # the warm-up runs compute this very step: writing its K/V again is harmless
            self.graph.replay()
            logits = self.logits
        self.cache.advance(1)
        return logits.to(torch.float32, copy=True)  # the graph's output is overwritten by the next replay
