"""`--config` strings to the schema's types.

Values given with `--config` arrive as strings where they sit inside a structure
(Snakemake reads `matrix={"gpus": [1, 2]}` with YAML's BaseLoader), so validation
first converts strings to the type the schema asks for.
"""

from __future__ import annotations

import re
from typing import Any

_NULL = re.compile(r"(null|Null|NULL|~)?")
_TRUE = re.compile(r"true|True|TRUE")
_FALSE = re.compile(r"false|False|FALSE")
_INTEGER = re.compile(r"[-+]?[0-9]+")
_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_NO_VALUE = object()


def _parse_scalar(text: str, kind: str) -> Any:
    """`text` as a value of JSON type `kind`, or _NO_VALUE when it is not one."""
    if kind == "null" and _NULL.fullmatch(text):
        return None
    if kind == "boolean" and (_TRUE.fullmatch(text) or _FALSE.fullmatch(text)):
        return bool(_TRUE.fullmatch(text))
    if kind in ("integer", "number") and _INTEGER.fullmatch(text):
        return int(text)
    if kind == "number" and _NUMBER.fullmatch(text):
        return float(text)
    return _NO_VALUE


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "other"


def _wanted_types(schema: dict) -> list[str]:
    """The JSON types a schema accepts: its `type` (one or a list), else those of its `enum` values."""
    declared = schema.get("type")
    if declared is None and "enum" in schema:
        return sorted({_json_type(value) for value in schema["enum"]})
    return [declared] if isinstance(declared, str) else list(declared or [])


def coerce(instance: Any, schema: dict) -> Any:
    """A copy of `instance` with strings converted where the schema wants another type.

    Walks properties, additionalProperties and items, and of a key with alternative forms
    (oneOf: matrix.seeds, a list or a mapping) the form of the instance's shape. A string stays
    a string where the schema accepts strings (or says nothing), and where it does not parse as
    any wanted type: validation then rejects it, naming the key.
    """
    if "oneOf" in schema:
        shape = "array" if isinstance(instance, list) else "object" if isinstance(instance, dict) else None
        form = next((branch for branch in schema["oneOf"] if branch.get("type") == shape), None)
        return coerce(instance, form) if form is not None else instance
    if isinstance(instance, str):
        wanted = _wanted_types(schema)
        if not wanted or "string" in wanted:
            return instance
        for kind in wanted:
            value = _parse_scalar(instance, kind)
            if value is not _NO_VALUE:
                return value
        return instance
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        others = schema.get("additionalProperties")
        coerced = {}
        for name, value in instance.items():
            subschema = properties.get(name, others if isinstance(others, dict) else None)
            coerced[name] = coerce(value, subschema) if subschema is not None else value
        return coerced
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [coerce(value, schema["items"]) for value in instance]
    return instance
