"""Varlen packing: several short sequences share one forward pass, without padding.

The sequences are laid end to end in one row; positions restart at 0 for each, and `cu_seq_lens` tells the
fa3 kernels where each begins (under `sdpa`, transformers derives a block-diagonal mask from the positions).
"""
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from worker.llm.runtime import LLMRuntime
from worker.llm.session import logits_chunk_tokens, synchronize


def plan_packs(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group sequence indices, in order, into packs of at most `budget` tokens (a longer sequence goes alone)."""
    if budget < 1:
        raise ValueError("budget must be positive")
    packs: list[list[int]] = []
    total = 0
    for index, length in enumerate(lengths):
        if length < 1:
            raise ValueError(f"sequence {index} is empty")
        if not packs or total + length > budget:
            packs.append([])
            total = 0
        packs[-1].append(index)
        total += length
    return packs


@dataclass(frozen=True)
class PackedBatch:
    """One row of concatenated sequences with the varlen metadata the attention needs."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seq_lens: torch.Tensor
    max_length: int

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]], device: torch.device) -> "PackedBatch":
        """Concatenate `sequences` into one row on `device`."""
        lengths = [len(sequence) for sequence in sequences]
        ids = torch.tensor([token for sequence in sequences for token in sequence], dtype=torch.long, device=device)
        positions = torch.cat([torch.arange(length, device=device) for length in lengths])
        with torch.inference_mode(False):  # a version counter, by which fa3fp8 checks the offsets once per pass
            cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
        return cls(ids[None], positions[None], cu, max(lengths))

    def attention_kwargs(self) -> dict:
        """Keyword arguments that carry the packing through the model to the attention functions."""
        return {
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
        }

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Cut per-token `values` (first dim = packed tokens) back into one tensor per sequence."""
        bounds = self.cu_seq_lens.tolist()
        return [values[start:end] for start, end in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class PackedOutput:
    """One sequence's values from a packed pass, and its share of the pass's seconds."""

    values: torch.Tensor
    seconds: float


@torch.inference_mode()
def packed_outputs(
    runtime: LLMRuntime, sequences: Sequence[Sequence[int]], output: Literal["hidden", "logprobs"]
) -> list[PackedOutput]:
    """Run `sequences` through the model in packed forward passes; return one output per sequence.

    `hidden`: the final (normed) hidden states, (len, hidden). `logprobs`: log p(token_i | tokens_<i) for
    i >= 1, (len - 1,). Values are float32 on the CPU; each pack's time is shared by its sequences in
    proportion to their tokens. Packs hold at most `pack_token_budget` tokens (fewer for logprobs, whose
    logits must fit a fixed budget).
    """
    if output not in ("hidden", "logprobs"):
        raise ValueError(f"output must be 'hidden' or 'logprobs', got {output!r}")
    budget = runtime.pack_token_budget
    if output == "logprobs":
        budget = min(budget, logits_chunk_tokens(runtime))
    results: list[PackedOutput | None] = [None] * len(sequences)
    for pack in plan_packs([len(sequence) for sequence in sequences], budget):
        synchronize(runtime.device)
        start_time = time.perf_counter()
        batch = PackedBatch.build([sequences[index] for index in pack], runtime.device)
        if output == "hidden":
            out = runtime.model.get_decoder()(input_ids=batch.input_ids, use_cache=False, **batch.attention_kwargs())
            per_sequence = batch.split(out.last_hidden_state[0].float())
        else:
            out = runtime.model(
                input_ids=batch.input_ids, use_cache=False, logits_to_keep=0, **batch.attention_kwargs()
            )
            per_sequence = [
                F.log_softmax(logits[:-1].float(), dim=-1).gather(1, ids[1:, None]).squeeze(1)
                for logits, ids in zip(batch.split(out.logits[0]), batch.split(batch.input_ids[0]))
            ]
        per_sequence = [values.cpu() for values in per_sequence]
        seconds = time.perf_counter() - start_time
        pack_tokens = batch.input_ids.shape[1]
        for index, values in zip(pack, per_sequence):
            results[index] = PackedOutput(values, seconds * len(sequences[index]) / pack_tokens)
    return results
