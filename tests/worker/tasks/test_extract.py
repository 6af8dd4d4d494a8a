"""`extract`: answers validated against the schema with pydantic, one retry, then a per-document error.

A tiny Llama is scripted so that its greedy answer is known: with the attention and MLP outputs zeroed, the
next token depends only on the current one, and the LM head is set to map chosen tokens to chosen successors.
"""
import pytest
import torch
from pydantic import ValidationError
from transformers import AutoTokenizer, LlamaForCausalLM

from core.documents import DocumentError
from core.json_schema import model_from_schema
from core.settings import get_settings
from core.task_specs import validate_options
from worker.tasks import get_task
from worker.tasks.extract import find_json_object, validate_answer

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}}}
# The prompt ends with "only." and the retry message with "JSON:"; "[SEP]" is the end of sequence.
SCRIPTS = {
    "valid-first": {".": "{", "{": "}", "}": "[SEP]"},
    "valid-on-retry": {".": "no", "no": "[SEP]", ":": "{", "{": "}", "}": "[SEP]"},
    "never-valid": {".": "no", ":": "no", "no": "[SEP]"},
}


def scripted_llama(source, target, transitions: dict[str, str]):
    """Save a copy of the checkpoint at `source` whose greedy next token follows `transitions`."""
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = LlamaForCausalLM.from_pretrained(source, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        for current, following in transitions.items():
            hidden = model.model.norm(model.model.embed_tokens.weight[tokenizer.convert_tokens_to_ids(current)])
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(following)] += 50 * hidden / hidden.square().sum()
    model.to(torch.bfloat16).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture
def extract_with(tiny_llama, tmp_path, monkeypatch):
    """Run `extract` on a document with the model scripted by SCRIPTS[name]."""

    def run(name, document):
        monkeypatch.setenv("DOCFLASH_LLM_MODEL", str(scripted_llama(tiny_llama, tmp_path / name, SCRIPTS[name])))
        get_settings.cache_clear()
        options = validate_options("extract", {"schema": SCHEMA, "max_new_tokens": 8})
        return get_task("extract").process_batch([document], options)[0]

    yield run
    get_settings.cache_clear()


def test_valid_first_answer(extract_with, make_document, texts):
    result = extract_with("valid-first", make_document(texts["wal"]))
    assert result["data"] == {} and result["attempts"] == 1
    assert result["usage"]["output_tokens"] == 2


def test_invalid_answer_gets_one_retry(extract_with, make_document, texts):
    result = extract_with("valid-on-retry", make_document(texts["wal"]))
    assert result["data"] == {} and result["attempts"] == 2
    assert result["usage"]["output_tokens"] == 1 + 2


def test_still_invalid_after_retry_is_a_document_error(extract_with, make_document, texts):
    error = extract_with("never-valid", make_document(texts["bread"], "bread-doc"))
    assert isinstance(error, DocumentError) and error.doc_id == "bread-doc"
    assert str(error).startswith("bread-doc: the model's answer is not valid JSON for the schema after 2 attempts")


@pytest.mark.parametrize(
    ("answer", "data"),
    [
        ('{"title": "Q3 report", "year": 2024}', {"title": "Q3 report", "year": 2024}),
        ('Sure.\n```json\n{"year": "2024"}\n```', {"year": 2024}),
    ],
    ids=["plain", "fenced-coerced"],
)
def test_validate_answer(answer, data):
    assert validate_answer(answer, model_from_schema(SCHEMA)) == data


@pytest.mark.parametrize("answer", ['{"year": "soon"}', "no json here"], ids=["wrong-type", "no-object"])
def test_validate_answer_refuses(answer):
    with pytest.raises((ValidationError, ValueError)):
        validate_answer(answer, model_from_schema(SCHEMA))


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Here it is:\n```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
        ('{broken {"a": 2} trailing }', {"a": 2}),
    ],
    ids=["bare", "fenced", "after-broken"],
)
def test_find_json_object(answer, expected):
    assert find_json_object(answer) == expected


def test_find_json_object_without_object():
    with pytest.raises(ValueError, match="no JSON object"):
        find_json_object("[1, 2] and prose")
