"""embed: unit vectors, meaningful similarities, chunking by tokens, and batching that changes nothing."""
import math

import pytest
import torch

from core.task_specs import validate_options
from worker.encoder import get_encoder
from worker.tasks import get_task


def _embed(documents, **options):
    return get_task("embed").process_batch(documents, validate_options("embed", options))


def _vector(result):
    return torch.tensor(result["embedding"])


@pytest.mark.parametrize("chunk_tokens", [16, 64, 256], ids=["chunk16", "chunk64", "chunk256"])
def test_embedding_is_a_unit_vector_over_token_chunks(make_document, texts, chunk_tokens):
    [result] = _embed([make_document(texts["wal"])], chunk_tokens=chunk_tokens)
    tokens = len(get_encoder().tokenize([texts["wal"]])[0])
    assert result["dim"] == 384 and len(result["embedding"]) == 384
    assert result["tokens"] == tokens
    assert result["chunks"] == math.ceil(tokens / chunk_tokens)
    assert _vector(result).norm().item() == pytest.approx(1.0, abs=1e-5)


def test_related_documents_are_closer_than_unrelated_ones(make_document, texts):
    names = ["wal", "recovery", "bread", "attention"]
    results = _embed([make_document(texts[name], name) for name in names], chunk_tokens=32)
    vectors = dict(zip(names, (_vector(result) for result in results)))
    related = vectors["wal"] @ vectors["recovery"]
    assert related > vectors["wal"] @ vectors["bread"] + 0.2
    assert related > vectors["wal"] @ vectors["attention"]
    assert related > vectors["recovery"] @ vectors["bread"] + 0.2


def test_single_chunk_equals_the_encoder_embedding(make_document, texts):
    [result] = _embed([make_document(texts["bread"])], chunk_tokens=256)
    assert result["chunks"] == 1
    expected = get_encoder().encode([texts["bread"]])[0]
    assert torch.allclose(_vector(result), expected, atol=1e-6)


def test_chunks_are_weighted_by_their_tokens(make_document, texts):
    """A document of a long and a short chunk leans to the long chunk's subject."""
    encoder = get_encoder()
    bread_ids = encoder.tokenize([texts["bread"]])[0][:60]
    wal_ids = encoder.tokenize([texts["wal"]])[0][:4]
    text = encoder.tokenizer.decode(bread_ids + wal_ids)
    [result] = _embed([make_document(text)], chunk_tokens=60)
    bread_chunk, wal_chunk = encoder.encode_ids([bread_ids, wal_ids])
    unweighted = torch.nn.functional.normalize(bread_chunk + wal_chunk, dim=0)
    vector = _vector(result)
    assert result["chunks"] == 2
    assert vector @ bread_chunk > unweighted @ bread_chunk


def test_batching_documents_changes_no_result(make_document, texts):
    documents = [make_document(texts[name], name) for name in ("wal", "bread", "attention")]
    together = _embed(documents, chunk_tokens=24)
    alone = [_embed([document], chunk_tokens=24)[0] for document in documents]
    for batched, single in zip(together, alone):
        assert batched["chunks"] == single["chunks"]
        assert torch.allclose(_vector(batched), _vector(single), atol=1e-5)


def test_llm_embeddings_need_an_llm(make_document, texts, settings_without_llm):
    with pytest.raises(ValueError, match="needs an LLM"):
        _embed([make_document(texts["wal"])], model="llm")
