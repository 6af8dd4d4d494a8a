"""LLM embeddings: mean-pooled, normalized hidden states of chunks, through packed passes and the embed task."""
import pytest
import torch
import torch.nn.functional as F

from core.documents import DocumentError
from core.task_specs import validate_options
from worker.llm.embedding import embed_texts
from worker.llm.prompts import encode_text
from worker.tasks import Document, get_task


def chunk_vector(runtime, ids):
    with torch.inference_mode():
        hidden = runtime.model.get_decoder()(input_ids=torch.tensor([ids])).last_hidden_state[0].float()
    return F.normalize(hidden.mean(dim=0), dim=0)


def test_embedding_is_the_weighted_mean_of_chunk_vectors(load_tiny, sample_text):
    runtime = load_tiny(pack_token_budget=100)
    ids = encode_text(runtime.tokenizer, sample_text)
    [result] = embed_texts(runtime, [sample_text], chunk_tokens=48)
    chunks = [ids[start : start + 48] for start in range(0, len(ids), 48)]
    expected = sum(len(chunk) * chunk_vector(runtime, chunk) for chunk in chunks)
    assert result["chunks"] == len(chunks) and result["tokens"] == len(ids) and result["dim"] == 64
    torch.testing.assert_close(torch.tensor(result["embedding"]), F.normalize(expected, dim=0), atol=0.02, rtol=0.02)
    assert result["usage"]["input_tokens"] == len(ids) and result["usage"]["prefill_s"] > 0


def test_embed_task_with_llm(llm_settings, sample_text):
    documents = [Document("a", sample_text), Document("empty", " \n "), Document("b", sample_text[:120])]
    options = validate_options("embed", {"model": "llm", "chunk_tokens": 32})
    a, empty, b = get_task("embed").process_batch(documents, options)
    assert isinstance(empty, DocumentError) and str(empty) == "empty: the document has no text to embed"
    for result in (a, b):
        assert len(result["embedding"]) == 64
        assert sum(value * value for value in result["embedding"]) == pytest.approx(1.0, abs=1e-4)
    assert a["chunks"] > b["chunks"] >= 1
