"""The sentence encoder (all-MiniLM-L6-v2 by default): token ids in, L2-normalized mean-pooled vectors out.

Loaded once per process from a local folder (no network), on the worker's GPU when there is one.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from core.settings import get_settings

# Padded tokens per forward pass; bounds activation memory whatever the mix of lengths.
DEFAULT_BATCH_TOKENS = 16_384
MAX_BATCH_SIZE = 256


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """Return the tokenizer stored at `path` (a folder, or a hub id already in the local cache), once per process."""
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


class SentenceEncoder:
    """Embeds texts, or pre-tokenized chunks, as unit vectors (mean over non-padding tokens, L2-normalized)."""

    def __init__(self, model_path: str, device: str | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS):
        if batch_tokens <= 0:
            raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = load_tokenizer(model_path)
        self.model = AutoModel.from_pretrained(model_path, local_files_only=True).to(self.device).eval()
        self.dim: int = self.model.config.hidden_size
        self.max_positions: int = min(self.model.config.max_position_embeddings, self.tokenizer.model_max_length)
        self.max_tokens: int = _trained_sequence_length(model_path) or self.max_positions
        self.batch_tokens = batch_tokens

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens and without truncation."""
        if not texts:
            return []
        return self.tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]

    def encode(self, texts: list[str]) -> torch.Tensor:
        """Embed each text (cut to the model's trained length); returns a float32 CPU tensor (len(texts), dim)."""
        limit = self.max_tokens - 2
        return self.encode_ids([ids[:limit] for ids in self.tokenize(texts)])

    def encode_ids(self, chunks: list[list[int]]) -> torch.Tensor:
        """Embed pre-tokenized chunks (ids without special tokens, each at most max_positions - 2 long).

        Chunks are batched by length so that little compute goes to padding; the result keeps their order.
        """
        longest = self.max_positions - 2
        if any(len(chunk) > longest for chunk in chunks):
            raise ValueError(f"chunks: each chunk must hold at most {longest} tokens")
        out = torch.empty(len(chunks), self.dim, dtype=torch.float32)
        order = sorted(range(len(chunks)), key=lambda i: len(chunks[i]), reverse=True)
        for batch in self._batches(order, chunks):
            out[batch] = self._forward([chunks[i] for i in batch])
        return out

    def _batches(self, order: list[int], chunks: list[list[int]]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        for index in order:
            width = len(chunks[current[0]]) + 2 if current else 0
            if current and (len(current) >= MAX_BATCH_SIZE or (len(current) + 1) * width > self.batch_tokens):
                batches.append(current)
                current = []
            current.append(index)
        if current:
            batches.append(current)
        return batches

    @torch.inference_mode()
    def _forward(self, chunks: list[list[int]]) -> torch.Tensor:
        cls_id, sep_id, pad_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.tokenizer.pad_token_id
        width = max(len(chunk) for chunk in chunks) + 2
        input_ids = torch.full((len(chunks), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunks), width), dtype=torch.long)
        for row, chunk in enumerate(chunks):
            input_ids[row, : len(chunk) + 2] = torch.tensor([cls_id, *chunk, sep_id])
            mask[row, : len(chunk) + 2] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
        return torch.nn.functional.normalize(pooled, dim=-1).cpu()


@lru_cache(maxsize=2)
def _encoder_at(model_path: str) -> SentenceEncoder:
    return SentenceEncoder(model_path)


def get_encoder() -> SentenceEncoder:
    """Return this process's encoder for `settings.embed_model_path`, loading it on first use."""
    return _encoder_at(embed_model_path())


def embed_model_path() -> str:
    """The encoder folder from the settings; a ValueError naming the variable when it holds no model."""
    path = get_settings().embed_model_path
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"DOCFLASH_EMBED_MODEL_PATH: no model folder (with a config.json) at {path!r}")
    return path


def _trained_sequence_length(model_path: str) -> int | None:
    """The max_seq_length a sentence-transformers folder declares, if any."""
    config = Path(model_path) / "sentence_bert_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("max_seq_length")
