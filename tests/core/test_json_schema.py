"""JSON schemas as pydantic models: what they accept and refuse, and schemas they cannot express."""
import pytest
from pydantic import ValidationError

from core.json_schema import MAX_DEPTH, model_from_schema

def nested_objects(levels: int) -> dict:
    """An object schema whose string leaf is `levels` properties below the root ($.a.a...)."""
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


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
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"a": {"enum": [["x"], ["y"]]}}}, r"\$\.a: 'enum' values must be strings"),
        ({"type": "object", "properties": {"a": {"enum": {"x": 1}}}}, r"\$\.a: 'enum' must be a non-empty list"),
        ({"type": "object", "properties": {"a": {"type": {"name": "string"}}}},
         r"\$\.a: unsupported or missing 'type'"),
        ({"type": "object", "properties": {"a": {"type": [["string"]]}}}, r"\$\.a: a 'type' list must hold type names"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [["a"]]},
         "'required' a list of names"),
        (nested_objects(MAX_DEPTH + 1), rf"\$(\.a){{{MAX_DEPTH + 1}}}: nested more than {MAX_DEPTH} levels deep"),
        (nested_objects(3000), f"nested more than {MAX_DEPTH} levels deep"),
    ],
    ids=["enum-of-lists", "enum-not-a-list", "type-object", "type-list-of-lists", "required-not-names", "too-deep",
         "far-too-deep"],
)
def test_malformed_schemas_are_value_errors(schema, message):
    """Schemas come from API callers: a malformed one is a ValueError naming the place, never a TypeError or a
    RecursionError."""
    with pytest.raises(ValueError, match=message):
        model_from_schema(schema)


def test_nesting_up_to_the_limit_is_accepted():
    model = model_from_schema(nested_objects(MAX_DEPTH))
    data = "deep"
    for _ in range(MAX_DEPTH):
        data = {"a": data}
    assert model.model_validate(data).model_dump(by_alias=True) == data
