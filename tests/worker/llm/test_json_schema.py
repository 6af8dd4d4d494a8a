"""JSON schemas as pydantic models, and JSON objects found in answers."""
import pytest
from pydantic import ValidationError

from worker.llm.json_schema import find_json_object, model_from_schema

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["report", "letter"]},
        "author": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "pages": {"type": ["integer", "null"]},
        "schema": {"type": "boolean"},
    },
    "required": ["title", "year"],
    "additionalProperties": False,
}


def test_valid_object_round_trips():
    model = model_from_schema(SCHEMA)
    data = {"title": "Q3", "year": 2024, "tags": ["a"], "kind": "report", "author": {"name": "Ann"}, "pages": None,
            "schema": True}
    assert model.model_validate(data).model_dump(by_alias=True, exclude_unset=True) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"year": 2024}, "title"),
        ({"title": "Q3", "year": "soon"}, "year"),
        ({"title": "Q3", "year": 1, "kind": "memo"}, "kind"),
        ({"title": "Q3", "year": 1, "author": {}}, "name"),
        ({"title": "Q3", "year": 1, "extra": 1}, "extra"),
    ],
    ids=["missing-required", "wrong-type", "not-in-enum", "nested-missing", "extra-field"],
)
def test_invalid_objects_are_refused(data, message):
    with pytest.raises(ValidationError, match=message):
        model_from_schema(SCHEMA).model_validate(data)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "array"}, "type 'object'"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, r"\$\.a: '\$ref'"),
        ({"type": "object", "properties": {"a": {"type": "date"}}}, "unsupported or missing 'type'"),
        ({"type": "object", "properties": {}, "required": ["a"]}, "have no properties"),
    ],
    ids=["not-object", "ref", "unknown-type", "required-unknown"],
)
def test_unsupported_schemas_name_the_place(schema, message):
    with pytest.raises(ValueError, match=message):
        model_from_schema(schema)


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
