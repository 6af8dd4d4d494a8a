"""Task options: defaults, accepted values, and errors that name the bad field."""
import subprocess
import sys

import pytest
from pydantic import ValidationError

from core.task_specs import TASK_OPTIONS, UnknownTaskError, options_error, validate_options

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}}}
REF_SCHEMA = {"type": "object", "properties": {"when": {"type": "object", "$ref": "#/defs/date"}}}
ANY_OF_ITEMS_SCHEMA = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
}
NESTED_ALL_OF_SCHEMA = {
    "type": "object",
    "properties": {"author": {"type": "object", "properties": {"name": {"allOf": [{"type": "string"}]}}}},
}


@pytest.fixture(autouse=True)
def built_in_tasks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide the tasks that other test modules register, so these tests see the built-in ones in any order."""
    for name in [name for name, model in TASK_OPTIONS.items() if model.__module__ != "core.task_specs"]:
        monkeypatch.delitem(TASK_OPTIONS, name)


def test_every_contract_task_has_options():
    assert set(TASK_OPTIONS) == {"noop", "stats", "embed", "summarize", "extract", "classify", "score"}


@pytest.mark.parametrize(
    "task, options, expected",
    [
        pytest.param("noop", None, {}, id="noop"),
        pytest.param("stats", {}, {"tokenizer": "encoder"}, id="stats-default"),
        pytest.param("stats", {"tokenizer": "llm"}, {"tokenizer": "llm"}, id="stats-llm-tokenizer"),
        pytest.param("embed", {}, {"chunk_tokens": 256, "model": "encoder"}, id="embed-default"),
        pytest.param("embed", {"model": "llm", "chunk_tokens": 4096}, {"chunk_tokens": 4096, "model": "llm"},
                     id="embed-llm"),
        pytest.param(
            "summarize", {},
            {"method": "extractive", "sentences": 5, "max_new_tokens": 256, "prompt": None, "map_reduce": False},
            id="summarize-default",
        ),
        pytest.param(
            "summarize", {"method": "abstractive", "prompt": "In one line:", "map_reduce": True},
            {"method": "abstractive", "sentences": 5, "max_new_tokens": 256, "prompt": "In one line:",
             "map_reduce": True},
            id="summarize-abstractive",
        ),
        pytest.param("extract", {"schema": SCHEMA}, {"schema": SCHEMA, "max_new_tokens": 512}, id="extract"),
        pytest.param(
            "classify", {"labels": [" legal ", "medical"]}, {"labels": ["legal", "medical"], "prompt": None},
            id="classify-strips-labels",
        ),
        pytest.param("score", {"chunk_tokens": 1024}, {"chunk_tokens": 1024}, id="score"),
    ],
)
def test_valid_options(task, options, expected):
    assert validate_options(task, options).model_dump(by_alias=True) == expected


@pytest.mark.parametrize(
    "task, options, field, message",
    [
        pytest.param("noop", {"fast": True}, "fast", "Extra inputs are not permitted", id="noop-extra"),
        pytest.param("stats", {"tokenizer": "/etc/passwd"}, "tokenizer", "'encoder' or 'llm'", id="stats-tokenizer"),
        pytest.param("embed", {"chunk_tokens": 4}, "chunk_tokens", "greater than or equal to 8", id="embed-tiny-chunk"),
        pytest.param("embed", {"chunk_tokens": 1024}, "chunk_tokens", "at most 510 with model='encoder'",
                     id="embed-chunk-too-big"),
        pytest.param("embed", {"model": "bert"}, "model", "'encoder' or 'llm'", id="embed-model"),
        pytest.param("summarize", {"sentences": 0}, "sentences", "greater than or equal to 1", id="summarize-zero"),
        pytest.param("summarize", {"method": "magic"}, "method", "'extractive' or 'abstractive'",
                     id="summarize-method"),
        pytest.param("summarize", {"prompt": "Be brief"}, "prompt", "applies only to method='abstractive'",
                     id="summarize-prompt-needs-llm"),
        pytest.param("summarize", {"map_reduce": True}, "map_reduce", "applies only to method='abstractive'",
                     id="summarize-map-reduce-needs-llm"),
        pytest.param("summarize", {"sentences": "five"}, "sentences", "valid integer", id="summarize-type"),
        pytest.param("extract", {}, "schema", "Field required", id="extract-no-schema"),
        pytest.param("extract", {"schema": {"type": "array"}}, "schema", "must describe an object", id="extract-array"),
        pytest.param("extract", {"schema": {"type": "object"}}, "schema", "under \"properties\"",
                     id="extract-no-props"),
        pytest.param("extract", {"schema": REF_SCHEMA}, "schema", "schema at $.when: '$ref' is not supported",
                     id="extract-ref"),
        pytest.param("extract", {"schema": ANY_OF_ITEMS_SCHEMA}, "schema",
                     "schema at $.tags[]: 'anyOf' is not supported", id="extract-any-of-items"),
        pytest.param("extract", {"schema": NESTED_ALL_OF_SCHEMA}, "schema",
                     "schema at $.author.name: 'allOf' is not supported", id="extract-nested-all-of"),
        pytest.param("classify", {"labels": ["spam"]}, "labels", "at least 2 items", id="classify-one-label"),
        pytest.param("classify", {"labels": ["a", "a "]}, "labels", "distinct", id="classify-duplicates"),
        pytest.param("classify", {"labels": ["a", " "]}, "labels", "empty", id="classify-blank"),
        pytest.param("score", {"chunk_tokens": 2}, "chunk_tokens", "greater than or equal to 16", id="score-chunk"),
    ],
)
def test_bad_options_name_the_field(task, options, field, message):
    with pytest.raises(ValidationError) as caught:
        validate_options(task, options)
    [error] = caught.value.errors()
    assert ".".join(str(part) for part in error["loc"]) == field
    assert message in error["msg"]


@pytest.mark.parametrize("task", ["translate", "", None], ids=["unknown", "empty", "none"])
def test_unknown_task(task):
    with pytest.raises(UnknownTaskError, match="known tasks: classify, embed, extract, noop, score, stats, summarize"):
        validate_options(task, {})


def test_options_error_names_the_option_under_options():
    with pytest.raises(ValidationError) as caught:
        validate_options("summarize", {"sentences": 0})
    field, message = options_error(caught.value)
    assert field == "options.sentences" and "greater than or equal to 1" in message


def test_options_are_immutable():
    options = validate_options("summarize", {"sentences": 3})
    with pytest.raises(ValidationError):
        options.sentences = 4


def test_specs_and_documents_stay_torch_free():
    code = "import sys, core.task_specs, core.documents; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
