"""`score` on a tiny random Llama: log-probs agree with one full forward, whether packed or prefilled in chunks."""
import math

import pytest
import torch

from core.documents import DocumentError
from core.task_specs import validate_options
from worker.llm.prompts import encode_text
from worker.llm.runtime import get_runtime
from worker.llm.session import logits_chunk_tokens
from worker.tasks import get_task


def full_forward_logprobs(runtime, text: str) -> torch.Tensor:
    ids = encode_text(runtime.tokenizer, text)
    with torch.inference_mode():
        logits = runtime.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)


def test_scores_match_a_full_forward(llm_settings, make_document, texts):
    runtime = get_runtime(llm_settings)
    short = "Checkpoints bound recovery time."
    documents = [make_document(short, "short"), make_document(texts["wal"], "long"), make_document(texts["bread"], "b")]
    assert len(encode_text(runtime.tokenizer, short)) <= logits_chunk_tokens(runtime)
    assert len(encode_text(runtime.tokenizer, texts["wal"])) > logits_chunk_tokens(runtime)
    results = get_task("score").process_batch(documents, validate_options("score", {"chunk_tokens": 16}))
    for document, result in zip(documents, results):
        expected = full_forward_logprobs(runtime, document.text)
        assert result["tokens"] == expected.numel() + 1 and result["scored_tokens"] == expected.numel()
        assert result["logprob"] == pytest.approx(float(expected.sum()), abs=0.05 * expected.numel() ** 0.5)
        assert result["perplexity"] == pytest.approx(math.exp(-result["logprob"] / result["scored_tokens"]))
        assert [chunk["start"] for chunk in result["chunks"]] == list(range(1, result["tokens"], 16))
        assert sum(chunk["logprob"] for chunk in result["chunks"]) == pytest.approx(result["logprob"])
        assert result["usage"]["input_tokens"] == result["tokens"] and result["usage"]["prefill_s"] > 0


@pytest.mark.parametrize(
    ("text", "message"),
    [("hello", "at least 2 tokens"), ("word " * 600, "the model's context is 512 tokens")],
    ids=["one-token", "over-context"],
)
def test_bad_documents_fail_alone(llm_settings, make_document, texts, text, message):
    bad, good = make_document(text, "bad"), make_document(texts["bread"], "good")
    results = get_task("score").process_batch([bad, good], validate_options("score", {}))
    assert isinstance(results[0], DocumentError) and results[0].doc_id == "bad"
    assert str(results[0]).startswith("bad: ") and message in str(results[0])
    chunks = math.ceil(results[1]["scored_tokens"] / llm_settings.prefill_chunk_tokens)
    assert results[1]["scored_tokens"] > 10 and len(results[1]["chunks"]) == chunks
