"""JSON schemas (the subset `extract` supports) as pydantic models; torch-free, so that the API refuses an
unsupported schema at submit time with the same code that validates the worker's answers."""
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_UNSUPPORTED = ("$ref", "anyOf", "oneOf", "allOf", "not", "if", "patternProperties")


# Properties and array items below the root; deeper schemas are refused rather than recursed into without
# bound (they come from API callers).
MAX_DEPTH = 32


def _field_type(schema: dict, path: str, depth: int) -> Any:
    if not isinstance(schema, dict):
        raise ValueError(f"schema at {path} must be an object")
    if depth > MAX_DEPTH:
        raise ValueError(f"schema at {path}: nested more than {MAX_DEPTH} levels deep")
    for keyword in _UNSUPPORTED:
        if keyword in schema:
            raise ValueError(f"schema at {path}: '{keyword}' is not supported")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise ValueError(f"schema at {path}: 'enum' must be a non-empty list")
        if not all(value is None or isinstance(value, (str, int, float)) for value in values):
            raise ValueError(f"schema at {path}: 'enum' values must be strings, numbers, booleans or null")
        return Literal[tuple(values)]
    kind = schema.get("type")
    if isinstance(kind, list):
        if not kind:
            raise ValueError(f"schema at {path}: 'type' must not be an empty list")
        if not all(isinstance(one, str) for one in kind):
            raise ValueError(f"schema at {path}: a 'type' list must hold type names")
        options = [_field_type({**schema, "type": one}, path, depth) for one in kind]
        union = options[0]
        for option in options[1:]:
            union = union | option
        return union
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return list[_field_type(schema.get("items", {"type": "string"}), f"{path}[]", depth + 1)]
    if kind == "object" or "properties" in schema:
        return _object_model(schema, path, depth)
    raise ValueError(f"schema at {path}: unsupported or missing 'type' {kind!r}")


def model_from_schema(schema: dict, path: str = "$") -> type[BaseModel]:
    """A pydantic model that validates objects against `schema` (a JSON schema of type object).

    Supports properties, required, additionalProperties: false, nested objects, arrays, enums and type lists,
    up to MAX_DEPTH levels deep; raises ValueError naming the place in the schema for anything else.
    """
    return _object_model(schema, path, 0)


def _object_model(schema: dict, path: str, depth: int) -> type[BaseModel]:
    if not isinstance(schema, dict) or (schema.get("type", "object") != "object"):
        raise ValueError(f"schema at {path} must be a JSON schema of type 'object'")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if (not isinstance(properties, dict) or not isinstance(required, list)
            or not all(isinstance(name, str) for name in required)):
        raise ValueError(f"schema at {path}: 'properties' must be an object and 'required' a list of names")
    unknown = [name for name in required if name not in properties]
    if unknown:
        raise ValueError(f"schema at {path}: required names {unknown} have no properties")
    fields: dict[str, Any] = {}
    for name, sub in properties.items():
        field_type = _field_type(sub, f"{path}.{name}", depth + 1)
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
