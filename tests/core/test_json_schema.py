"""JSON schemas as pydantic models: what they accept and refuse, and schemas they cannot express."""
import pytest
from pydantic import ValidationError

from core.json_schema import model_from_schema

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

