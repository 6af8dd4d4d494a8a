"""JSON schemas (the subset `extract` supports) as pydantic models; torch-free, so that the API refuses an
unsupported schema at submit time with the same code that validates the worker's answers."""
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_UNSUPPORTED = ("$ref", "anyOf", "oneOf", "allOf", "not", "if", "patternProperties")


def _field_type(schema: dict, path: str) -> Any:
    if not isinstance(schema, dict):
        raise ValueError(f"schema at {path} must be an object")
    for keyword in _UNSUPPORTED:
        if keyword in schema:
            raise ValueError(f"schema at {path}: '{keyword}' is not supported")
    if "enum" in schema:
        if not schema["enum"]:
            raise ValueError(f"schema at {path}: 'enum' must not be empty")
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        if not kind:
            raise ValueError(f"schema at {path}: 'type' must not be an empty list")
        options = [_field_type({**schema, "type": one}, path) for one in kind]
        union = options[0]
        for option in options[1:]:
            union = union | option
        return union
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return list[_field_type(schema.get("items", {"type": "string"}), f"{path}[]")]
    if kind == "object" or "properties" in schema:
        return model_from_schema(schema, path)
    raise ValueError(f"schema at {path}: unsupported or missing 'type' {kind!r}")


def model_from_schema(schema: dict, path: str = "$") -> type[BaseModel]:
    """A pydantic model that validates objects against `schema` (a JSON schema of type object).

    Supports properties, required, additionalProperties: false, nested objects, arrays, enums and type lists;
    raises ValueError naming the place in the schema for anything else.
    """
    if not isinstance(schema, dict) or (schema.get("type", "object") != "object"):
        raise ValueError(f"schema at {path} must be a JSON schema of type 'object'")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise ValueError(f"schema at {path}: 'properties' must be an object and 'required' a list")
    unknown = [name for name in required if name not in properties]
    if unknown:
        raise ValueError(f"schema at {path}: required names {unknown} have no properties")
    fields: dict[str, Any] = {}
    for name, sub in properties.items():
        field_type = _field_type(sub, f"{path}.{name}")
        if name in required:
            fields[name] = (field_type, Field(alias=name))
        else:
            fields[name] = (field_type | None, Field(None, alias=name))
    extra = "forbid" if schema.get("additionalProperties") is False else "ignore"
    return create_model(
        "Extraction",
        __config__=ConfigDict(extra=extra, populate_by_name=True, strict=False),
        **{f"field_{index}": spec for index, spec in enumerate(fields.values())},
    )

