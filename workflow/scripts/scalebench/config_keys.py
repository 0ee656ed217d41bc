"""The config keys as config/schema.yaml declares them, for what needs a key's meaning outside the
planner: the record definitions (records/definitions.py), whose fields that hold a setting take
their type, unit and meaning from here instead of stating them again.

The file as written: the registry's backends and launch templates are filled in by the planner
(config/validation.py load_schema), and no key read here is one of those. Plain YAML, read once.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schema.yaml"

# A key's JSON-schema type as a record field's type (records/fields.py TYPES)
RECORD_TYPES = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "object": "object"}


@cache
def declared() -> dict:
    """config/schema.yaml, parsed (do not change it: it is shared)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader where PyYAML has it: every rank reads this
    with open(SCHEMA) as handle:
        return yaml.load(handle, Loader=loader)


def key(path: str, schema: dict | None = None) -> dict:
    """The schema's node of a dotted key, e.g. training.epochs."""
    node = declared() if schema is None else schema
    for name in path.split("."):
        properties = node.get("properties", {})
        if name not in properties:
            raise KeyError(f"config/schema.yaml declares no key {path}")
        node = properties[name]
    return node


def types(node: dict) -> list[str]:
    """The key's JSON types, null aside ([] where only an enum says: its values' type)."""
    declared_type = node.get("type", [])
    found = [declared_type] if isinstance(declared_type, str) else list(declared_type)
    if not found and "enum" in node:
        kinds = {type(value) for value in node["enum"] if value is not None}
        found = ["string"] if kinds == {str} else []
    return [kind for kind in found if kind != "null"]


def nullable(node: dict) -> bool:
    declared_type = node.get("type", [])
    return "null" in ([declared_type] if isinstance(declared_type, str) else declared_type) or None in node.get(
        "enum", []
    )


def record_type(node: dict) -> str:
    """The type a record field holding this key's value has (records/fields.py TYPES)."""
    kinds = {RECORD_TYPES.get(kind, "any") for kind in types(node)}
    if kinds == {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 else "any"


def first_sentence(text: str) -> str:
    """The description's first sentence: up to the first full stop outside brackets (so e.g. stays)."""
    text = " ".join(text.split())
    depth = 0
    for index, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "." and depth == 0 and (index + 1 == len(text) or text[index + 1] == " "):
            return text[: index + 1]
    return text


def meaning(path: str, schema: dict | None = None) -> str:
    """What the key is, in its own description's first sentence, naming the key (and its values
    where it has a few that the sentence does not list)."""
    node = key(path, schema)
    sentence = first_sentence(node["description"])
    values = [str(value) for value in node.get("enum", []) if value is not None]
    listed = f" (one of {', '.join(values)})" if values and not all(value in sentence for value in values) else ""
    return f"{path}: {sentence}{listed}"


def when_null(path: str, schema: dict | None = None) -> str:
    """What null means for the key, as its description says ('null: ...' or 'null = ...', to the end
    of that sentence or clause), else that it is null."""
    said = re.search(r"\bnull(?::| =) (.+?)(?:[.;](?: |$)|$)", " ".join(key(path, schema)["description"].split()))
    return f"{path} null: {said.group(1).strip()}" if said else f"{path} is null"


def unit(path: str) -> str:
    """The key's unit where its name says it (the schema's _s keys are seconds)."""
    return "s" if path.endswith("_s") else ""
