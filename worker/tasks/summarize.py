"""`summarize`: extractive (the document's most central sentences) or abstractive (LLM-written) summaries.

Extractive centrality is the continuous degree centrality of LexRank: a sentence's summed cosine similarity
to all candidate sentences, which for unit vectors is its similarity to their mean, so it costs O(n).
"""
from __future__ import annotations

import re

import torch

from core.documents import DocumentError
from core.settings import get_settings
from core.task_specs import SummarizeOptions
from worker.encoder import get_encoder
from worker.llm.runtime import get_runtime
from worker.llm.summarization import summarize
from worker.sentences import Sentence, split_sentences
from worker.tasks.base import BatchTask, Document, naming, register_task

MIN_CANDIDATE_WORDS = 6
# A sentence this similar to one already picked adds nothing; skip it while others remain.
REDUNDANCY_THRESHOLD = 0.92
_ENDS_LIKE_A_SENTENCE = re.compile(r"[.!?…][\"'”’)\]]*$")


@register_task
class SummarizeTask(BatchTask):
    """Dispatches on `options.method`; extractive summaries of a batch share one encoder pass."""

    name = "summarize"

    def __init__(self):
        self.encoder = get_encoder()

    def process_batch(self, documents: list[Document], options: SummarizeOptions) -> list[dict | DocumentError]:
        """Return {"method", "summary", "sentences", "total_sentences"} or a DocumentError per document."""
        if options.method == "abstractive":
            return self._abstractive(documents, options)
        return self._extractive(documents, options)

    def _abstractive(self, documents: list[Document], options: SummarizeOptions) -> list[dict | DocumentError]:
        runtime = get_runtime(get_settings(), "abstractive summarization")
        results: list[dict | DocumentError] = []
        for document in documents:
            try:
                results.append(summarize(runtime, document.text, prompt=options.prompt,
                                         max_new_tokens=options.max_new_tokens, map_reduce=options.map_reduce))
            except DocumentError as error:
                results.append(naming(error, document.id))
        return results

    def _extractive(self, documents: list[Document], options: SummarizeOptions) -> list[dict | DocumentError]:
        plans = [_candidates(split_sentences(document.text)) for document in documents]
        vectors = self.encoder.encode([sentence.text for _, candidates in plans for _, sentence in candidates])
        results: list[dict | DocumentError] = []
        offset = 0
        for document, (total, candidates) in zip(documents, plans):
            if not candidates:
                results.append(DocumentError(f"{document.id}: no sentences to summarize", document.id))
                continue
            embeddings = vectors[offset:offset + len(candidates)]
            offset += len(candidates)
            scores = embeddings @ torch.nn.functional.normalize(embeddings.mean(dim=0), dim=0)
            picked = sorted(_pick(embeddings, scores, options.sentences))
            chosen = [
                {
                    "index": candidates[i][0],
                    "score": round(float(scores[i]), 4),
                    "text": candidates[i][1].text,
                    "start": candidates[i][1].start,
                    "end": candidates[i][1].end,
                }
                for i in picked
            ]
            results.append({
                "method": "extractive",
                "summary": " ".join(item["text"] for item in chosen),
                "sentences": chosen,
                "total_sentences": total,
            })
        return results


def _candidates(sentences: list[Sentence]) -> tuple[int, list[tuple[int, Sentence]]]:
    """(number of sentences, [(index, sentence)] worth picking): prose sentences, not headings or fragments;
    all sentences when the document has no such prose."""
    indexed = list(enumerate(sentences))
    prose = [
        (index, sentence) for index, sentence in indexed
        if len(sentence.text.split()) >= MIN_CANDIDATE_WORDS and _ENDS_LIKE_A_SENTENCE.search(sentence.text)
    ]
    return len(sentences), prose or indexed


def _pick(embeddings: torch.Tensor, scores: torch.Tensor, k: int) -> list[int]:
    """Indices of the k highest scores, passing over near-duplicates of those picked while others remain."""
    picked: list[int] = []
    skipped: list[int] = []
    for index in torch.argsort(scores, descending=True).tolist():
        if len(picked) == k:
            break
        if picked and float((embeddings[picked] @ embeddings[index]).max()) > REDUNDANCY_THRESHOLD:
            skipped.append(index)
        else:
            picked.append(index)
    return picked + skipped[: k - len(picked)]
