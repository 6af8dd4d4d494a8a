"""Abstractive summaries: one pass, too-long documents, map-reduce."""
import json

import pytest

from core.documents import DocumentError
from worker.llm.summarization import summarize


def test_summary_carries_accounting(load_tiny, sample_text):
    runtime = load_tiny(prefill_chunk_tokens=64)
    result = summarize(runtime, sample_text, prompt=None, max_new_tokens=8, map_reduce=False)
    assert result["method"] == "abstractive" and result["parts"] == 1
    assert isinstance(result["summary"], str)
    usage = result["usage"]
    assert usage["input_tokens"] > 150 and 0 < usage["output_tokens"] <= 8
    assert usage["prefill_s"] > 0 and usage["attention_impl"] == "sdpa"


def test_too_long_document_is_a_document_error(load_tiny, sample_text):
    with pytest.raises(DocumentError, match=r"document is \d+ tokens; the model's context of 512 tokens"):
        summarize(load_tiny(), sample_text * 4, prompt=None, max_new_tokens=8, map_reduce=False)


def test_map_reduce_summarizes_in_parts(load_tiny, sample_text):
    prompt = "Sum up {document} in brief."
    result = summarize(load_tiny(), sample_text * 4, prompt=prompt, max_new_tokens=8, map_reduce=True)
    assert result["parts"] >= 3
    assert result["usage"]["input_tokens"] > 4 * 150
    assert result["usage"]["output_tokens"] <= 8 * result["parts"]


def test_abstractive_summaries_through_local_mode(llm_settings, sample_text, tmp_path):
    from worker.local import run_local

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "short.txt").write_text(sample_text)
    (inputs / "long.txt").write_text(sample_text * 4)
    options = {"method": "abstractive", "max_new_tokens": 6, "map_reduce": True}
    manifest = run_local(inputs, "summarize", tmp_path / "out", options, llm_settings, progress=False)
    assert manifest["counts"]["succeeded"] == 2
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    records = {record["id"]: record["result"] for record in map(json.loads, lines)}
    parts = sorted(result["parts"] for result in records.values())
    assert parts[0] == 1 and parts[1] >= 3
    assert all(result["usage"]["output_tokens"] <= 6 * result["parts"] for result in records.values())
