"""stats: counts that match the text, tokens from the encoder's tokenizer."""
import pytest

from core.task_specs import validate_options
from worker.encoder import get_encoder
from worker.tasks import get_task


def test_counts_of_a_known_text(make_document):
    text = "# Recovery\n\nThe log is flushed first. Then pages follow!\nDr. Lee's 3.5 ms write-back test passed.\n"
    result = get_task("stats").process(make_document(text), validate_options("stats", {}))
    assert result == {
        "characters": len(text),
        "words": 16,
        "sentences": 4,
        "paragraphs": 2,
        "lines": 4,
        "tokens": len(get_encoder().tokenizer(text, add_special_tokens=False)["input_ids"]),
        "tokenizer": "encoder",
    }
    assert result["words"] < result["tokens"]


@pytest.mark.parametrize("subject", ["wal", "attention"])
def test_counts_of_prose(make_document, texts, subject):
    text = texts[subject]
    result = get_task("stats").process(make_document(text), validate_options("stats", {}))
    assert result["words"] == len(text.split())
    assert result["sentences"] == text.count(". ") + 1
    assert result["words"] < result["tokens"] < 2 * result["words"]
    assert (result["paragraphs"], result["lines"]) == (1, 1)


def test_llm_tokenizer_needs_a_configured_llm(make_document, texts, settings_without_llm):
    with pytest.raises(ValueError, match="DOCFLASH_LLM_MODEL"):
        get_task("stats").process(make_document(texts["wal"]), validate_options("stats", {"tokenizer": "llm"}))
