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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from scalebench import backends
from scalebench.backends import BACKENDS, FRAMEWORKS  # noqa: F401 (the rules read them here)
from scalebench.cell import AXES, OWN_SOURCE, Cell  # Cell is also reached as config.Cell
from scalebench.data.split import split_counts
from scalebench.launch import local_gpus
from scalebench.launch.resources import node_layout, ranks_per_node_limit

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
    dataset, matrix, cluster = config["dataset"], config["matrix"], config["cluster"]
    height, width = dataset["image_size"]
    if height % 16 or width % 16:
        problems.append(
            f"config key 'dataset.image_size': {height} x {width} is not divisible by 16 "
            "(the UNet halves the size four times)"
        )
    if dataset["source"] == "folder" and not dataset["folder"]:
        problems.append("config key 'dataset.folder': required when dataset.source is folder")
    axes = axis_problems(config)
    if axes:  # the cells below cannot be built without them
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems + axes))
    if dataset["source"] == "synthetic":
        problems += synthetic_batch_problems(config)
    if config["training"]["stop_at_target"] and not config["training"]["eval_every"]:
        problems.append(
            "config key 'training.stop_at_target': needs training.eval_every > 0 (the target is checked on "
            "the validation IOU of the evaluated epochs)"
        )
    largest = max(matrix["gpus"])
    if largest > cluster["max_gpus"]:
        problems.append(f"config key 'matrix.gpus': {largest} GPUs exceed cluster.max_gpus = {cluster['max_gpus']}")
    if cluster["gpu_binding"] == "task" and not cluster["gpus_per_node"]:
        problems.append(
            "config key 'cluster.gpu_binding': task binds GPUs to tasks, but cluster.gpus_per_node is 0 "
            "(a CPU-only cluster); use node"
        )
    problems += matrix_problems(config)
    if not cluster["allow_uneven"]:
        # one-process backends never span nodes (left_out), so only the counts of other cells matter
        for gpus in sorted({cell.gpus for cell in cells(config)}):
            reason = placement_problem(gpus, cluster)
            if reason:
                problems.append(f"config key 'matrix.gpus': {reason} (or set cluster.allow_uneven: true)")
    for executor, templates in config["launchers"].items():
        for name, template in templates.items():
            problem = template_problem(template)
            if problem:
                problems.append(f"config key 'launchers.{executor}.{name}': {problem}")
    problems += legacy_label_problems(config["legacy"])
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def strong_cells(config: dict) -> bool:
    """Whether any cell of the study scales strongly (training.scaling or matrix.scaling)."""
    return "strong" in config["matrix"].get("scaling", [config["training"]["scaling"]])


def axis_problems(config: dict) -> list[str]:
    """The optional axes and the scaling settings, before any cell is built."""
    matrix, training, problems = config["matrix"], config["training"], []
    if strong_cells(config):
        where = "matrix.scaling" if "scaling" in matrix else "training.scaling"
        global_batch = training["global_batch"]
        if global_batch is None:
            problems.append(f"config key 'training.global_batch': required with strong scaling ({where} strong)")
        else:
            for gpus in sorted(matrix["gpus"]):
                if global_batch % gpus:
                    problems.append(
                        f"config key 'training.global_batch': {global_batch} does not divide over {gpus} GPUs "
                        f"(matrix.gpus); strong scaling gives every rank global_batch / GPUs images per step"
                    )
        if "batch_per_gpu" in matrix:
            problems.append(
                f"config key 'matrix.batch_per_gpu': strong scaling ({where}) divides training.global_batch "
                "over the ranks, so it has no batch per GPU to sweep; sweep batch sizes in weak scaling only"
            )
    key = "matrix.precision" if "precision" in matrix else "training.precision"
    for precision in dict.fromkeys(matrix.get("precision", [training["precision"]])):
        problem = backends.precision_problem(precision, training["device"])
        if problem:
            problems.append(f"config key '{key}': {problem} (training.device: {training['device']})")
    return problems


def synthetic_batch_problems(config: dict) -> list[str]:
    """Every cell's batch per rank must fit in its shard of the synthetic training set."""
    dataset, problems = config["dataset"], []
    count = dataset["synthetic"]["count"]
    n_train, n_val, n_test = split_counts(count, dataset["test_fraction"], dataset["val_fraction"])
    if n_train < 1:
        return [
            f"config key 'dataset.synthetic.count': {count} pairs leave no training data after "
            f"{n_test} test and {n_val} validation pairs (dataset.test_fraction, dataset.val_fraction)"
        ]
    seen = set()
    for cell in cells(config):
        batch = cell_training(config, cell)["batch_per_gpu"]
        shard = n_train // cell.gpus
        if batch > shard and (batch, cell.gpus) not in seen:
            seen.add((batch, cell.gpus))
            problems.append(
                f"config key '{batch_key(cell)}': {batch} is larger than the shard of the "
                f"training set on {cell.gpus} ranks ({n_train} training pairs / {cell.gpus} = {shard})"
            )
    return problems


def batch_key(cell: Cell) -> str:
    """The config key that sets a cell's batch per rank, for messages."""
    axes = dict(cell.axes)
    if axes.get("scaling") == "strong":  # a strong cell always names its scaling (variants)
        return "training.global_batch"
    return "matrix.batch_per_gpu" if "batch_per_gpu" in axes else "training.batch_per_gpu"


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


def cell_problem(config: dict, cell: Cell, machine_gpus: int | None = None) -> str | None:
    """Why the matrix leaves `cell` out, or None when it runs.

    A pair that does not exist; fewer ranks than the backend needs (fsdp on 1); a backend
    that drives one node from one process (dp, mirrored) on more devices than a node has;
    dp on more than one device where the config says there are no GPUs (training.device:
    cpu, or a CPU-only cluster); a gradient compression or compiled steps the backend does not have; a
    strong-scaling global batch that does not divide over the cell's GPUs. With
    `machine_gpus` (a local run: launch/local_gpus.py), more GPUs than this machine has.
    """
    framework, backend, gpus = cell.framework, cell.backend, cell.gpus
    if not backends.exists(framework, backend):
        name = backends.FRAMEWORK_NAMES[framework]
        return f"{backend} is not a {name} backend (the backends: {backends.describe_registry()})"
    spec = backends.spec(framework, backend)
    if gpus < spec.min_ranks:
        return spec.min_ranks_reason
    cluster, device = config["cluster"], config["training"]["device"]
    if spec.one_process:
        per_node = ranks_per_node_limit(cluster)
        if gpus > per_node:
            key = "cluster.gpus_per_node" if cluster["gpus_per_node"] else "cluster.ranks_per_node, a CPU-only cluster"
            return f"{backend} drives the devices of one node from one process, and a node has {per_node} ({key})"
    if spec.cpu_devices is not None and gpus > spec.cpu_devices:
        if device == "cpu":
            return f"{spec.cpu_reason} (training.device: cpu)"
        if cluster["gpus_per_node"] == 0:
            return f"{spec.cpu_reason} (cluster.gpus_per_node: 0, a CPU-only cluster)"
    training = cell_training(config, cell)
    compression = backends.compression_problem(framework, backend, training["compression"])
    if compression:
        return compression
    compiled = backends.compile_problem(framework, backend, training["compile"], training["deterministic"])
    if compiled:
        return compiled
    if training["scaling"] == "strong" and training["global_batch"] is None:
        return "training.global_batch is required with strong scaling"
    if training["scaling"] == "strong" and training["global_batch"] % gpus:
        return f"training.global_batch {training['global_batch']} does not divide over {gpus} GPUs (strong scaling)"
    if machine_gpus is not None:
        return local_gpus.problem(device, gpus, machine_gpus)
    return None


@dataclass(frozen=True)
class LeftOut:
    """Cells of the matrix that do not run: a framework/backend pair (at a variant of the optional
    axes), at the GPU counts named, and why."""

    framework: str
    backend: str
    gpus: tuple[int, ...]
    reason: str
    every_count: bool  # all of the matrix's GPU counts (a pair that does not exist, say)
    variant: str = ""

    @property
    def item(self) -> str:
        """'tensorflow/fsdp', 'torch/fsdp g1', or 'tensorflow/native compress-fp16' for a variant."""
        pair = f"{self.framework}/{self.backend}" + (f" {self.variant}" if self.variant else "")
        return pair if self.every_count else f"{pair} " + ", ".join(f"g{g}" for g in self.gpus)

    def describe(self) -> str:
        return f"left out: {self.item}: {self.reason}"


def variants(config: dict) -> list[tuple[tuple[str, Any], ...]]:
    """The axes of every combination of the optional axes the matrix lists, in a stable order:
    [()] for a study without them. A strong-scaling cell always names itself and its global
    batch (training.scaling: strong alone too, so it never shares a folder with a weak one)."""
    matrix, training = config["matrix"], config["training"]
    listed = [axis for axis in AXES if axis in matrix]
    combos = []
    for values in itertools.product(*[matrix[axis] for axis in listed]):
        axes = dict(zip(listed, values, strict=True))
        if axes.get("scaling", training["scaling"]) == "strong":
            axes.update(scaling="strong", global_batch=training["global_batch"])
        combos.append(tuple(axes.items()))
    return combos


def _every_cell(config: dict) -> Iterator[Cell]:
    matrix = config["matrix"]
    for framework, backend, axes, gpus, seed in itertools.product(
        matrix["frameworks"], matrix["backends"], variants(config), sorted(matrix["gpus"]), sorted(matrix["seeds"])
    ):
        yield Cell(framework, backend, gpus, seed, axes)


def left_out(config: dict, machine_gpus: int | None = None) -> list[LeftOut]:
    """The cells of the matrix that do not run, grouped by pair, variant and reason (machine_gpus:
    as cell_problem's)."""
    counts = sorted(config["matrix"]["gpus"])
    reasons: dict[tuple, list[int]] = {}
    for cell in _every_cell(config):
        reason = cell_problem(config, cell, machine_gpus)
        if reason:
            counts_of = reasons.setdefault((cell.framework, cell.backend, cell.variant, reason), [])
            if cell.gpus not in counts_of:
                counts_of.append(cell.gpus)
    return [
        LeftOut(framework, backend, tuple(gpus), reason, gpus == counts, variant)
        for (framework, backend, variant, reason), gpus in reasons.items()
    ]


def matrix_problems(config: dict) -> list[str]:
    """A backend listed for none of the listed frameworks, or one that leaves no cell to run."""
    matrix, problems = config["matrix"], []
    runnable = cells(config)
    for backend in matrix["backends"]:
        if not any(backends.exists(framework, backend) for framework in matrix["frameworks"]):
            owners = ", ".join(backends.FRAMEWORK_NAMES[f] for f in backends.frameworks_of(backend))
            problems.append(
                f"config key 'matrix.backends': {backend} exists for none of matrix.frameworks "
                f"{matrix['frameworks']} (it is a {owners} backend; {backends.describe_registry()})"
            )
        elif not any(cell.backend == backend for cell in runnable):
            why = "; ".join(e.describe() for e in left_out(config) if e.backend == backend)
            problems.append(
                f"config key 'matrix.backends': no cell of {backend} can run with matrix.gpus {sorted(matrix['gpus'])} "
                f"({why}); give matrix.gpus a count it can run, or remove {backend}"
            )
    return problems


def cells(config: dict, machine_gpus: int | None = None) -> list[Cell]:
    """Every cell of the matrix that runs (see left_out for the others), in a stable order."""
    return [cell for cell in _every_cell(config) if cell_problem(config, cell, machine_gpus) is None]


def cell_training(config: dict, cell: Cell) -> dict:
    """The training settings of one cell: the study's, with the values of the cell's optional
    axes, and in strong scaling the batch per rank that divides the global batch."""
    training = copy.deepcopy(config["training"])
    axes = dict(cell.axes)
    for axis in AXES:
        if axis in axes:
            training[axis] = axes[axis]
    if training["scaling"] == "strong" and training["global_batch"] and training["global_batch"] % cell.gpus == 0:
        training["batch_per_gpu"] = training["global_batch"] // cell.gpus
    return training


def train_settings(config: dict, cell: Cell) -> dict:
    """Everything the training program needs for one cell, as plain JSON."""
    settings = {
        "cell": cell.to_json(),
        "training": cell_training(config, cell),
        "peak_tflops": config["cluster"]["peak_tflops"],
        "gpus_per_node": config["cluster"]["gpus_per_node"],
        "dataset": {
            "source": config["dataset"]["source"],
            "image_size": config["dataset"]["image_size"],
            "split_seed": config["dataset"]["split_seed"],
        },
    }
    # only where set: the cells of a study without it keep their settings (and are not retrained)
    if config["cluster"]["network_interface"]:
        settings["network_interface"] = config["cluster"]["network_interface"]
    if config["cluster"]["gpu_binding"] != "node":  # a rank sees only its own GPUs (train/devices.py)
        settings["gpu_binding"] = config["cluster"]["gpu_binding"]
    return settings


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
