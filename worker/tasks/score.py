"""`score`: the LLM's log-likelihood of each document: total log-prob, perplexity and per-chunk values.

Short documents are packed into shared forward passes; long ones are prefilled chunk by chunk over a KV
cache, log-probs taken per chunk, so full-sequence logits never exist.
"""
import math

from core.documents import DocumentError
from core.settings import get_settings
from core.task_specs import ScoreOptions
from worker.llm.packing import packed_outputs
from worker.llm.prompts import encode_text
from worker.llm.runtime import LLMRuntime, get_runtime
from worker.llm.session import Session, Usage, logits_chunk_tokens
from worker.tasks.base import BatchTask, Document, naming_documents, register_task


def score_summary(logprobs: list[float], tokens: int, chunk_tokens: int) -> dict:
    """Totals and per-chunk values from per-token log-probs (`logprobs[i]` scores token i + 1 of `tokens`; at
    least one, as `document_tokens` ensures)."""
    chunks = []
    for start in range(0, len(logprobs), chunk_tokens):
        piece = logprobs[start : start + chunk_tokens]
        chunks.append({
            "start": start + 1,
            "end": start + 1 + len(piece),
            "logprob": sum(piece),
            "perplexity": math.exp(-sum(piece) / len(piece)),
        })
    total = sum(logprobs)
    return {
        "tokens": tokens,
        "scored_tokens": len(logprobs),
        "logprob": total,
        "perplexity": math.exp(-total / len(logprobs)),
        "chunks": chunks,
    }


def document_tokens(runtime: LLMRuntime, text: str) -> list[int]:
    """The document's ids, after the BOS token when the tokenizer has one (so the first word is scored too)."""
    ids = encode_text(runtime.tokenizer, text)
    if runtime.tokenizer.bos_token_id is not None:
        ids.insert(0, runtime.tokenizer.bos_token_id)
    if len(ids) < 2:
        raise DocumentError("document needs at least 2 tokens to be scored")
    if len(ids) > runtime.max_context:
        raise DocumentError(f"document is {len(ids)} tokens; the model's context is {runtime.max_context} tokens")
    return ids


def score_documents(runtime: LLMRuntime, texts: list[str], chunk_tokens: int | None) -> list[dict | DocumentError]:
    """Score each text; packs the ones that fit one packed pass, prefills the others chunk by chunk."""
    chunk_tokens = chunk_tokens or runtime.prefill_chunk_tokens
    results: list[dict | DocumentError | None] = [None] * len(texts)
    short: dict[int, list[int]] = {}
    for index, text in enumerate(texts):
        try:
            ids = document_tokens(runtime, text)
        except DocumentError as error:
            results[index] = error
            continue
        if len(ids) <= logits_chunk_tokens(runtime):
            short[index] = ids
        else:
            session = Session(runtime)
            logprobs = session.prefill(ids, token_logprobs=True).tolist()
            results[index] = {**score_summary(logprobs, len(ids), chunk_tokens),
                              "usage": session.usage.as_dict(runtime.attention_impl)}
    for index, output in zip(short, packed_outputs(runtime, list(short.values()), "logprobs")):
        usage = Usage(input_tokens=len(short[index]), prefill_s=output.seconds)
        results[index] = {**score_summary(output.values.tolist(), len(short[index]), chunk_tokens),
                          "usage": usage.as_dict(runtime.attention_impl)}
    return results


@register_task
class ScoreTask(BatchTask):
    """Log-likelihood and perplexity of documents under the LLM."""
    name = "score"

    def process_batch(self, documents: list[Document], options: ScoreOptions) -> list[dict | DocumentError]:
        """Score documents, packing the short ones into shared forward passes."""
        runtime = get_runtime(get_settings(), "scoring")
        return naming_documents(
            documents, score_documents(runtime, [document.text for document in documents], options.chunk_tokens)
        )
