"""Validate the study configuration and expand it into cells.

The JSON schema (config/schema.yaml) fills defaults and rejects unknown keys and
bad values; the checks below cover what a schema cannot express. Every error
names the config key, and all of it runs before Snakemake builds a job.

Values given with `--config` arrive as strings where they sit inside a structure
(Snakemake reads `matrix={"gpus": [1, 2]}` with YAML's BaseLoader), so validation
first converts strings to the type the schema asks for (coerce).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from scalebench.cell import OWN_SOURCE, Cell  # Cell is also reached as config.Cell
from scalebench.launch.resources import node_layout, ranks_per_node_limit

FRAMEWORKS = ("torch", "tensorflow")
BACKENDS = ("native", "horovod")


class ConfigError(ValueError):
    """A configuration problem, with the offending key in the message."""


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


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = _key(error.absolute_path)
        names = ", ".join(f"'{where + '.' if error.absolute_path else ''}{e}'" for e in extra)
        return f"unknown config key {names}; allowed here: {', '.join(allowed)}"
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

    Walks properties, additionalProperties and items. A string stays a string where the
    schema accepts strings (or says nothing), and where it does not parse as any wanted
    type: validation then rejects it, naming the key.
    """
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


def load_schema(path: str | Path) -> dict:
    with open(path) as handle:
        return yaml.safe_load(handle)


def validate(config: dict, schema: dict) -> dict:
    """Return a copy of `config` with strings coerced (see coerce) and defaults filled in, or raise ConfigError."""
    resolved = coerce(copy.deepcopy(config), schema) if config else {}
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(resolved), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(_describe(e) for e in errors))
    _check_semantics(resolved)
    return resolved


def _check_semantics(config: dict) -> None:
    problems: list[str] = []
    dataset, matrix, training, cluster = (
        config["dataset"],
        config["matrix"],
        config["training"],
        config["cluster"],
    )
    height, width = dataset["image_size"]
    if height % 16 or width % 16:
        problems.append(
            f"config key 'dataset.image_size': {height} x {width} is not divisible by 16 "
            "(the UNet halves the size four times)"
        )
    if dataset["source"] == "folder" and not dataset["folder"]:
        problems.append("config key 'dataset.folder': required when dataset.source is folder")
    if dataset["source"] == "synthetic":
        count = dataset["synthetic"]["count"]
        n_test = max(1, round(count * dataset["test_fraction"]))
        n_train = count - n_test
        largest = max(matrix["gpus"])
        shard = n_train // largest
        if n_train < 1:
            problems.append(f"config key 'dataset.synthetic.count': {count} pairs leave no training data")
        elif training["batch_per_gpu"] > shard:
            problems.append(
                f"config key 'training.batch_per_gpu': {training['batch_per_gpu']} is larger than the "
                f"shard of the training set on {largest} ranks ({n_train} training pairs / {largest} = {shard})"
            )
    largest = max(matrix["gpus"])
    if largest > cluster["max_gpus"]:
        problems.append(f"config key 'matrix.gpus': {largest} GPUs exceed cluster.max_gpus = {cluster['max_gpus']}")
    if not cluster["allow_uneven"]:
        for gpus in matrix["gpus"]:
            reason = placement_problem(gpus, cluster)
            if reason:
                problems.append(f"config key 'matrix.gpus': {reason} (or set cluster.allow_uneven: true)")
    for executor, templates in config["launchers"].items():
        for name, template in templates.items():
            problem = template_problem(template)
            if problem:
                problems.append(f"config key 'launchers.{executor}.{name}': {problem}")
    if training["tf_strategy"] == "mirrored" and "tensorflow" in matrix["frameworks"]:
        too_big = [g for g in matrix["gpus"] if len(node_layout(cluster, g)) > 1]
        if too_big:
            problems.append(
                f"config key 'training.tf_strategy': mirrored runs in one process on one node, but cells "
                f"of {too_big} GPUs span several nodes ({ranks_per_node_limit(cluster)} per node); "
                "use auto or multiworker"
            )
    problems += legacy_label_problems(config["legacy"])
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def legacy_label_problems(entries: list[dict]) -> list[str]:
    """Labels that would merge two sources in the tables: repeated, or this project's own."""
    problems, labels = [], [entry["label"] for entry in entries]
    for index, label in enumerate(labels):
        if label == OWN_SOURCE or label in labels[:index]:
            problems.append(
                f"config key 'legacy[{index}].label': {label!r} is already used; give every import its own label"
            )
    return problems


LAUNCHER_PLACEHOLDERS = (
    "ranks",
    "nodes",
    "ranks_per_node",
    "hosts",
    "master_addr",
    "port",
    "cpus_per_rank",
    "python",
    "program",
    "scripts",
)


def template_problem(template: str) -> str | None:
    """Why a launcher template cannot be filled, or None."""
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as error:
        return f"malformed template ({error})"
    unknown = sorted({f for f in fields if f not in LAUNCHER_PLACEHOLDERS})
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}}; known: " + ", ".join(
            "{" + p + "}" for p in LAUNCHER_PLACEHOLDERS
        )
    if "program" not in fields:
        return "the template must contain {program}"
    return None


def placement_problem(gpus: int, cluster: dict) -> str | None:
    """Why a cell of `gpus` ranks would leave its last node short (uneven), or None."""
    layout = node_layout(cluster, gpus)
    if len(set(layout)) > 1:
        return f"{gpus} GPUs cannot be spread evenly over {len(layout)} nodes of {ranks_per_node_limit(cluster)}"
    return None


def cells(config: dict) -> list[Cell]:
    """Every cell of the matrix, in a stable order."""
    matrix = config["matrix"]
    return [
        Cell(framework, backend, gpus, seed)
        for framework, backend, gpus, seed in itertools.product(
            matrix["frameworks"], matrix["backends"], sorted(matrix["gpus"]), sorted(matrix["seeds"])
        )
    ]


def train_settings(config: dict, cell: Cell) -> dict:
    """Everything the training program needs for one cell, as plain JSON."""
    return {
        "cell": {"framework": cell.framework, "backend": cell.backend, "gpus": cell.gpus, "seed": cell.seed},
        "training": config["training"],
        "peak_tflops": config["cluster"]["peak_tflops"],
        "gpus_per_node": config["cluster"]["gpus_per_node"],
        "dataset": {
            "source": config["dataset"]["source"],
            "image_size": config["dataset"]["image_size"],
            "split_seed": config["dataset"]["split_seed"],
        },
    }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def settings_changes(trained: dict, now: dict) -> list[str]:
    """What differs between the settings a cell trained with and the study's now: 'key: old -> new'."""
    before, after = _flatten(trained), _flatten(now)
    missing = "(not set)"
    return [
        f"{key}: {json.dumps(before.get(key, missing))} -> {json.dumps(after.get(key, missing))}"
        for key in sorted(set(before) | set(after))
        if before.get(key, missing) != after.get(key, missing)
    ]
