"""Schema validation: defaults filled, unknown keys and bad values rejected, removed keys named
with what replaced them; then the checks across keys (checks.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from scalebench.config.checks import ConfigError, check_semantics
from scalebench.config.coercion import coerce
from scalebench.config.matrix import Matrix
from scalebench.config.registry_schema import fill as fill_from_registry

# Keys that existed once: validation refuses them by name, saying what replaced them.
REMOVED_KEYS = {
    "training.amp_dtype": (
        "training.precision names the type now: fp32, bf16 or fp16 (precision amp with amp_dtype "
        "bfloat16 is bf16); matrix.precision sweeps them"
    ),
    "training.horovod.fp16_compression": (
        "gradient compression is a setting of every backend now: training.compression: fp16 "
        "(true here) or none (false); Horovod applies it as hvd.Compression.fp16; matrix.compression sweeps both"
    ),
    "training.tf_strategy": (
        "TensorFlow's MirroredStrategy is a backend of its own now: list mirrored in matrix.backends "
        "(e.g. matrix.backends: [native, mirrored]); native is MultiWorkerMirroredStrategy"
    ),
}


def _key(path: Iterator[Any]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "<top level>"


def _with_defaults(validator_class: type) -> type:
    """A validator that fills `default` values while it validates (jsonschema FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _shape(instance: Any) -> str | None:
    return "array" if isinstance(instance, list) else "object" if isinstance(instance, dict) else None


def _describe_forms(error: jsonschema.ValidationError) -> str:
    """A value of a key with alternative forms (oneOf: matrix.seeds): what is wrong inside the form of
    its shape (a list, a mapping), else that it has neither shape; both with the key's forms."""
    key = _key(error.absolute_path)
    forms = " or ".join(_form(branch) for branch in error.validator_value)
    inside = [
        e
        for e in error.context
        if e.schema_path and error.validator_value[e.schema_path[0]].get("type") == _shape(error.instance)
    ]
    if inside:
        return f"{_describe(jsonschema.exceptions.best_match(inside))} ({key}: {forms})"
    return f"config key '{key}': {json.dumps(error.instance)} is not {forms}"


def _form(branch: dict) -> str:
    if branch.get("type") == "array":
        return f"a list of {branch['items'].get('type', 'values')}s"
    names = ", ".join(f"{name}: {sub.get('type', 'value')}" for name, sub in branch.get("properties", {}).items())
    return f"{{{names}}}"


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key(error.absolute_path)
    if error.validator == "oneOf":
        return _describe_forms(error)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = _key(error.absolute_path)
        full = [f"{where + '.' if error.absolute_path else ''}{e}" for e in extra]
        names = ", ".join(f"'{name}'" for name in full)
        hints = "".join(f"; '{name}' was removed: {REMOVED_KEYS[name]}" for name in full if name in REMOVED_KEYS)
        return f"unknown config key {names}; allowed here: {', '.join(allowed)}{hints}"
    if error.validator == "uniqueItems":
        seen, dups = set(), []
        for item in error.instance:
            if item in seen:
                dups.append(item)
            seen.add(item)
        return f"config key '{key}': duplicate values {sorted(set(dups))} in {error.instance}"
    if error.validator == "minItems" and error.validator_value == 1:
        return f"config key '{key}': the list is empty; give at least one value"
    return f"config key '{key}': {error.message}"


# Scalars as YAML 1.2's core schema reads them, so `--config` means what the same text means in a config file.


def load_schema(path: str | Path) -> dict:
    """config/schema.yaml with the registry's backends filled in (registry_schema.py)."""
    with open(path) as handle:
        return fill_from_registry(yaml.safe_load(handle))


def resolve(config: dict, schema: dict) -> dict:
    """A copy of `config` with strings coerced (see coerce) and the schema's defaults filled in, or
    ConfigError naming every key the schema refuses (no checks across keys: validate)."""
    resolved = coerce(copy.deepcopy(config), schema) if config else {}
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(resolved), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(_describe(e) for e in errors))
    return resolved


def validate_study(config: dict, schema: dict, folders: bool = True) -> tuple[dict, Matrix]:
    """validate's config, and its matrix as the checks expanded it (the plan reads that one);
    `folders`: check_semantics'."""
    resolved = resolve(config, schema)
    return resolved, check_semantics(resolved, folders)


def validate(config: dict, schema: dict) -> dict:
    """Return a copy of `config` with strings coerced (see coerce) and defaults filled in, or raise ConfigError."""
    return validate_study(config, schema)[0]
