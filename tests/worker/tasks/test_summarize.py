"""Extractive summaries: k sentences from the text, in document order, the central ones first in score."""
import pytest

from core.task_specs import validate_options
from worker.tasks import get_task

ON_TOPIC = [
    "The storage engine appends every change to the write-ahead log before touching the data file.",
    "On restart, the engine replays the log from the last checkpoint to restore committed transactions.",
    "Log records of unfinished transactions are undone so that no partial update survives a crash.",
    "Checkpoints limit how much of the log recovery has to read after a failure.",
    "Group commit flushes the log for many transactions at once to save disk writes.",
    "Because the log is sequential, flushing it is far cheaper than writing scattered data pages.",
]
OFF_TOPIC = [
    "My neighbour's cat likes to sleep on the warm roof of the car.",
    "The bakery on the corner sells rye bread on Saturdays only.",
]


def _summarize(documents, **options):
    return get_task("summarize").process_batch(documents, validate_options("summarize", options))


@pytest.mark.parametrize("k", [1, 3, 5], ids=["k1", "k3", "k5"])
def test_summary_sentences_come_from_the_text_in_order(make_document, texts, k):
    text = "\n\n".join(texts[name] for name in ("wal", "recovery", "attention"))
    [result] = _summarize([make_document(text)], sentences=k)
    chosen = result["sentences"]
    assert len(chosen) == k
    assert [item["index"] for item in chosen] == sorted(item["index"] for item in chosen)
    for item in chosen:
        assert " ".join(text[item["start"]:item["end"]].split()) == item["text"]
        assert item["text"] in " ".join(text.split())
        assert -1.0 <= item["score"] <= 1.0
    assert result["summary"] == " ".join(item["text"] for item in chosen)
    assert result["method"] == "extractive" and result["total_sentences"] == 10


def test_off_topic_sentences_are_left_out(make_document):
    text = " ".join(ON_TOPIC[:3] + OFF_TOPIC[:1] + ON_TOPIC[3:] + OFF_TOPIC[1:])
    [result] = _summarize([make_document(text)], sentences=4)
    picked = [item["text"] for item in result["sentences"]]
    assert not set(picked) & set(OFF_TOPIC)
    assert set(picked) <= set(ON_TOPIC)


def test_near_duplicates_are_not_picked_twice(make_document):
    repeated = ON_TOPIC[1]
    text = " ".join(ON_TOPIC + [repeated, repeated])
    [result] = _summarize([make_document(text)], sentences=3)
    picked = [item["text"] for item in result["sentences"]]
    assert picked.count(repeated) <= 1 and len(picked) == 3


def test_headings_are_not_summary_sentences(make_document, texts):
    text = f"# Crash recovery in databases\n\n{texts['wal']}\n\n## Journals after power loss\n\n{texts['recovery']}"
    [result] = _summarize([make_document(text)], sentences=4)
    assert all(not item["text"].startswith(("Crash recovery in", "Journals after")) for item in result["sentences"])


def test_a_short_document_gives_all_its_sentences(make_document):
    [result] = _summarize([make_document("Only one sentence here.")], sentences=5)
    assert [item["text"] for item in result["sentences"]] == ["Only one sentence here."]


def test_batch_of_documents_matches_one_by_one(make_document, texts):
    documents = [make_document(texts[name], name) for name in ("wal", "bread", "attention")] + [make_document(" ", "e")]
    together = _summarize(documents, sentences=2)
    assert str(together[3]) == "e: no sentences to summarize" and together[3].doc_id == "e"
    for document, batched in zip(documents[:3], together):
        [single] = _summarize([document], sentences=2)
        assert [item["index"] for item in batched["sentences"]] == [item["index"] for item in single["sentences"]]


def test_abstractive_needs_an_llm(make_document, texts, settings_without_llm):
    with pytest.raises(ValueError, match=r"abstractive summarization needs an LLM \(settings.llm_model\)"):
        _summarize([make_document(texts["wal"])], method="abstractive")
