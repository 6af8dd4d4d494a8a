"""`embed`: one unit vector per document, the token-weighted mean of its chunks' encoder embeddings."""
from __future__ import annotations

import torch

from core.documents import DocumentError
from core.settings import get_settings
from core.task_specs import EmbedOptions
from worker.encoder import get_encoder
from worker.llm.embedding import embed_texts
from worker.llm.runtime import get_runtime
from worker.tasks.base import BatchTask, Document, naming_documents, register_task


@register_task
class EmbedTask(BatchTask):
    """Chunks each document by `chunk_tokens` encoder tokens and embeds all chunks of a batch in one pass."""

    name = "embed"

    def __init__(self):
        self.encoder = get_encoder()

    def process_batch(self, documents: list[Document], options: EmbedOptions) -> list[dict | DocumentError]:
        """Return {"dim", "chunks", "tokens", "embedding"} or a DocumentError per document."""
        if options.model == "llm":
            return _embed_with_llm(documents, options)
        token_ids = self.encoder.tokenize([document.text for document in documents])
        chunked = [
            [ids[start:start + options.chunk_tokens] for start in range(0, len(ids), options.chunk_tokens)]
            for ids in token_ids
        ]
        vectors = self.encoder.encode_ids([chunk for chunks in chunked for chunk in chunks])
        results: list[dict | DocumentError] = []
        offset = 0
        for document, chunks in zip(documents, chunked):
            if not chunks:
                results.append(DocumentError(f"{document.id}: the document has no text to embed", document.id))
                continue
            weights = torch.tensor([len(chunk) for chunk in chunks], dtype=torch.float32)
            pooled = (vectors[offset:offset + len(chunks)] * weights.unsqueeze(1)).sum(dim=0)
            offset += len(chunks)
            embedding = torch.nn.functional.normalize(pooled, dim=0)
            results.append({
                "dim": self.encoder.dim,
                "chunks": len(chunks),
                "tokens": int(weights.sum().item()),
                "embedding": [round(value, 7) for value in embedding.tolist()],
            })
        return results


def _embed_with_llm(documents: list[Document], options: EmbedOptions) -> list[dict | DocumentError]:
    runtime = get_runtime(get_settings(), "embedding with model='llm'")
    return naming_documents(
        documents, embed_texts(runtime, [document.text for document in documents], options.chunk_tokens)
    )
