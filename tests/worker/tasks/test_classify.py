"""`classify` on a tiny random Llama: the label with the highest log-likelihood, computed independently."""
import json

import pytest
import torch

from core.task_specs import validate_options
from worker.llm.prompts import DocumentPrompt, encode_text
from worker.llm.runtime import get_runtime
from worker.local import run_local
from worker.tasks import get_task

LABELS = ["databases", "baking", "gpu kernels"]


def independent_label_logprob(runtime, text: str, label: str) -> float:
    """Sum of log p(label token | prompt, earlier label tokens) from one full forward, no cache."""
    instruction = f"Classify the document as one of: {', '.join(LABELS)}."
    prompt = DocumentPrompt(runtime.tokenizer, f"{instruction}\n\n", "\n\nLabel:")
    prompt_ids = prompt.render(encode_text(runtime.tokenizer, text))
    label_ids = encode_text(runtime.tokenizer, " " + label)
    with torch.inference_mode():
        logits = runtime.model(input_ids=torch.tensor([prompt_ids + label_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], -1)
    return float(logprobs.gather(1, torch.tensor(label_ids)[:, None]).sum())


@pytest.mark.parametrize("subject", ["wal", "bread", "attention"])
def test_picks_the_most_likely_label(llm_settings, make_document, texts, subject):
    options = validate_options("classify", {"labels": LABELS})
    result = get_task("classify").process(make_document(texts[subject]), options)
    runtime = get_runtime(llm_settings)
    expected = {label: independent_label_logprob(runtime, texts[subject], label) for label in LABELS}
    assert result["label"] == max(expected, key=expected.get)
    for label in LABELS:
        assert result["logprobs"][label] == pytest.approx(expected[label], abs=0.05)
    assert sum(result["probabilities"].values()) == pytest.approx(1.0)
    assert result["usage"]["input_tokens"] > 50 and result["usage"]["output_tokens"] == 0
    assert result["usage"]["attention_impl"] == "sdpa"


def test_local_job_gives_results_and_per_document_errors(llm_settings, texts, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "wal.txt").write_text(texts["wal"])
    (inputs / "bread.txt").write_text(texts["bread"])
    (inputs / "huge.txt").write_text(texts["attention"] * 20)
    manifest = run_local(inputs, "classify", tmp_path / "out", {"labels": LABELS}, llm_settings, progress=False)
    assert manifest["counts"]["succeeded"] == 2 and manifest["counts"]["failed"] == 1
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {record["result"]["label"] for record in results} <= set(LABELS) and len(results) == 2
    [error] = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert "huge" in error["id"] and "the model's context of 512 tokens" in error["error"]
