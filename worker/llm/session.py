"""A token stream over a KV cache: chunked prefill, per-token log-probs, greedy decoding and rollback."""
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from worker.llm.attention import quantized_prefill
from worker.llm.decode_graph import MIN_GRAPH_TOKENS, StaticDecoder, supports_static_decode
from worker.llm.kv_cache import new_cache
from worker.llm.runtime import LLMRuntime

LOGITS_BUDGET_ELEMENTS = 1 << 27


class ContextOverflowError(ValueError):
    """The stream would grow past the model's context length."""


@dataclass
class Usage:
    """Per-document accounting: tokens in and out, and where the time went."""

    input_tokens: int = 0
    output_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0

    def as_dict(self, attention_impl: str) -> dict:
        """The accounting as it goes into a result."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "prefill_s": round(self.prefill_s, 4),
            "decode_s": round(self.decode_s, 4),
            "attention_impl": attention_impl,
        }


@dataclass(frozen=True)
class Checkpoint:
    """A stream position to roll back to."""

    length: int
    next_logits: torch.Tensor | None


def logits_chunk_tokens(runtime: LLMRuntime) -> int:
    """Tokens per forward pass when full logits are kept, so the logits stay within a fixed budget."""
    return max(1, min(runtime.prefill_chunk_tokens, LOGITS_BUDGET_ELEMENTS // runtime.vocab_size))


def synchronize(device: torch.device) -> None:
    """Wait for the GPU so wall-clock timings cover the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Session:
    """One sequence fed to the model piece by piece; the KV cache keeps peak memory bounded by the chunk size.

    The cache holds up to the runtime's `max_context` tokens in the kernels' layout (see `kv_cache`); forwards run
    in `attention.quantized_prefill` over it, so that `fa3_fp8` prefill chunks reuse the cache's FP8 mirror.
    """

    def __init__(self, runtime: LLMRuntime, usage: Usage | None = None):
        self.runtime = runtime
        self.usage = usage if usage is not None else Usage()
        self.cache = new_cache(runtime.model.config, runtime.max_context)
        self.length = 0
        self.next_logits: torch.Tensor | None = None

    def _forward(self, ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        positions = torch.arange(self.length, self.length + ids.numel(), device=ids.device).unsqueeze(0)
        with quantized_prefill(self.cache):
            out = self.runtime.model(
                input_ids=ids.unsqueeze(0),
                position_ids=positions,
                use_cache=True,
                logits_to_keep=logits_to_keep,
                **{self.runtime.cache_kwarg: self.cache},
            )
        self.length += ids.numel()
        return out.logits[0]

    def _check_room(self, extra: int) -> None:
        if self.length + extra > self.runtime.max_context:
            raise ContextOverflowError(
                f"{self.length + extra} tokens exceed the model's context of {self.runtime.max_context} tokens"
            )

    @torch.inference_mode()
    def prefill(self, ids: Sequence[int], *, token_logprobs: bool = False) -> torch.Tensor | None:
        """Append `ids` in chunks of `prefill_chunk_tokens`, keeping only the last position's logits.

        With `token_logprobs`, return float32 log p(token | everything before it) for each appended token that
        has a predecessor (all of them unless the stream was empty), computed chunk by chunk.
        """
        if not ids:
            raise ValueError("ids must not be empty")
        self._check_room(len(ids))
        device = self.runtime.device
        tokens = torch.tensor(list(ids), dtype=torch.long, device=device)
        chunk = logits_chunk_tokens(self.runtime) if token_logprobs else self.runtime.prefill_chunk_tokens
        logprobs = []
        synchronize(device)
        start_time = time.perf_counter()
        for start in range(0, tokens.numel(), chunk):
            piece = tokens[start : start + chunk]
            logits = self._forward(piece, logits_to_keep=0 if token_logprobs else 1)
            if token_logprobs:
                if self.next_logits is None:
                    predictors, targets = logits[:-1], piece[1:]
                else:
                    predictors, targets = torch.cat([self.next_logits[None], logits[:-1]]), piece
                logprobs.append(
                    F.log_softmax(predictors.float(), dim=-1).gather(1, targets[:, None]).squeeze(1).cpu()
                )
            self.next_logits = logits[-1].float()
        synchronize(device)
        self.usage.prefill_s += time.perf_counter() - start_time
        self.usage.input_tokens += tokens.numel()
        return torch.cat(logprobs) if token_logprobs else None

    @torch.inference_mode()
    def generate(self, max_new_tokens: int) -> list[int]:
        """Greedy decoding from the end of the stream, until an end-of-sequence token or `max_new_tokens`."""
        if self.next_logits is None:
            raise ValueError("generate needs a prefilled stream")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        device = self.runtime.device
        generated: list[int] = []
        synchronize(device)
        start_time = time.perf_counter()
        static = None
        room = min(max_new_tokens, self.runtime.max_context - self.length)
        if (self.runtime.decode_graph and device.type == "cuda" and room >= MIN_GRAPH_TOKENS
                and supports_static_decode(self.runtime, self.cache)):
            static = StaticDecoder(self.runtime, self.cache, self.length, room, graph=True)
        while len(generated) < max_new_tokens and self.length < self.runtime.max_context:
            token = int(self.next_logits.argmax())
            if token in self.runtime.eos_token_ids:
                break
            generated.append(token)
            if static is not None:
                self.next_logits = static.step(token, self.length)
                self.length += 1
            else:
                logits = self._forward(torch.tensor([token], device=device), logits_to_keep=1)
                self.next_logits = logits[-1].float()
        synchronize(device)
        self.usage.decode_s += time.perf_counter() - start_time
        self.usage.output_tokens += len(generated)
        return generated

    def checkpoint(self) -> Checkpoint:
        """The current position, to come back to with `rollback`."""
        return Checkpoint(self.length, self.next_logits)

    def rollback(self, checkpoint: Checkpoint) -> None:
        """Drop everything appended after `checkpoint` from the stream and its KV cache."""
        if checkpoint.length > self.length:
            raise ValueError("cannot roll forward to a later checkpoint")
        if checkpoint.length < self.length:
            self.cache.crop(checkpoint.length - self.length)
        self.length = checkpoint.length
        self.next_logits = checkpoint.next_logits
