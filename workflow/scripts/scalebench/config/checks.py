"""What the schema cannot express: the checks across keys that run after validation, each
naming the config key, before Snakemake builds a job."""

from __future__ import annotations

import os
from pathlib import Path

from scalebench import architecture, backends, environments
from scalebench.cell import OWN_SOURCE, Cell, width_key
from scalebench.config import earlier_study
from scalebench.config.cell_settings import cell_model, cell_training
from scalebench.config.matrix import Matrix, expand
from scalebench.config.resources import node_layout, ranks_per_node_limit
from scalebench.config.seeds import seeds_problems
from scalebench.data.split import split_counts
from scalebench.measures import backward_passes, batches_per_epoch


class ConfigError(ValueError):
    """A configuration problem, with the offending key in the message."""


def check_semantics(config: dict, folders: bool = True) -> Matrix:
    """Raise ConfigError naming every key whose value the other keys rule out; else the config's
    matrix, expanded here once (once its axes are known to be sound) for every check and the plan.
    `folders`: check the folders other keys name (folder_problems); False in a job's own Snakemake,
    which reads none of them, on a node that may not reach them."""
    problems = dataset_problems(config)
    axes = axis_problems(config)
    if axes:  # the cells below cannot be built without them
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems + axes))
    expanded = expand(config)
    runnable = expanded.cells()
    if config["dataset"]["source"] == "synthetic":
        problems += synthetic_batch_problems(config, runnable)
    problems += model_fit_problems(config, runnable)
    problems += profile_problems(config, runnable)
    problems += environment_problems(config, runnable)
    problems += training_problems(config)
    problems += cluster_problems(config)
    problems += matrix_problems(config, expanded)
    problems += node_spread_problems(config, runnable)
    problems += launcher_problems(config)
    problems += legacy_label_problems(config["legacy"])
    if folders:  # a job's own Snakemake reads neither folder: a node that cannot reach them runs its job
        problems += folder_problems(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return expanded


def dataset_problems(config: dict) -> list[str]:
    """The image size the UNet can halve four times, and the folder a folder source needs."""
    dataset = config["dataset"]
    problems = []
    height, width = dataset["image_size"]
    if height % 16 or width % 16:
        problems.append(
            f"config key 'dataset.image_size': {height} x {width} is not divisible by 16 "
            "(the UNet halves the size four times)"
        )
    if dataset["source"] == "folder" and not dataset["folder"]:
        problems.append("config key 'dataset.folder': required when dataset.source is folder")
    return problems


def training_problems(config: dict) -> list[str]:
    """Training settings that rule each other out: fixed steps with a repeated dataset, and a stop
    at the target without the evaluations that would see it."""
    training = config["training"]
    problems = []
    if training["steps_per_epoch"] is not None and training["dataset_repeat"] > 1:
        problems.append(
            "config key 'training.steps_per_epoch': set together with training.dataset_repeat > 1; the "
            "steps fix each epoch's length by themselves (the shard is cycled), so leave dataset_repeat at 1"
        )
    if training["stop_at_target"] and not training["eval_every"]:
        problems.append(
            "config key 'training.stop_at_target': needs training.eval_every > 0 (the target is checked on "
            "the validation IOU of the evaluated epochs)"
        )
    return problems


def cluster_problems(config: dict) -> list[str]:
    """What the cluster cannot hold: more GPUs than cluster.max_gpus, GPUs bound to the tasks of a
    cluster without GPUs."""
    matrix, cluster = config["matrix"], config["cluster"]
    problems = []
    largest = max(matrix["gpus"])
    if largest > cluster["max_gpus"]:
        problems.append(f"config key 'matrix.gpus': {largest} GPUs exceed cluster.max_gpus = {cluster['max_gpus']}")
    if cluster["gpu_binding"] == "task" and not cluster["gpus_per_node"]:
        problems.append(
            "config key 'cluster.gpu_binding': task binds GPUs to tasks, but cluster.gpus_per_node is 0 "
            "(a CPU-only cluster); use node"
        )
    return problems


def node_spread_problems(config: dict, runnable: tuple[Cell, ...]) -> list[str]:
    """Each GPU count of the runnable cells that spreads unevenly over nodes, unless
    cluster.allow_uneven (uneven_nodes_problem)."""
    cluster = config["cluster"]
    if cluster["allow_uneven"]:
        return []
    problems = []
    # one-process backends never span nodes (left_out), so only the counts of other cells matter
    for gpus in sorted({cell.gpus for cell in runnable}):
        reason = uneven_nodes_problem(gpus, cluster)
        if reason:
            problems.append(f"config key 'matrix.gpus': {reason} (or set cluster.allow_uneven: true)")
    return problems


def launcher_problems(config: dict) -> list[str]:
    """Each launcher template that cannot be filled (template_problem), named by its key."""
    problems = []
    for executor, templates in config["launchers"].items():
        for name, template in templates.items():
            problem = template_problem(template)
            if problem:
                problems.append(f"config key 'launchers.{executor}.{name}': {problem}")
    return problems


def strong_cells(config: dict) -> bool:
    """Whether any cell of the study scales strongly (training.scaling or matrix.scaling)."""
    return "strong" in config["matrix"].get("scaling", [config["training"]["scaling"]])


def axis_problems(config: dict) -> list[str]:
    """The optional axes and the scaling settings, before any cell is built."""
    matrix, training = config["matrix"], config["training"]
    problems = seeds_problems(config)
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
    key = width_key(matrix)
    for width in matrix.get("model_width", [config["model"]["width"]]):
        if not isinstance(width, int):  # the schema's integer admits 4.0, which would name a folder width4.0
            problems.append(f"config key '{key}': {width!r} is not a whole number (write {int(width)})")
    key = "matrix.precision" if "precision" in matrix else "training.precision"
    for precision in dict.fromkeys(matrix.get("precision", [training["precision"]])):
        problem = backends.precision_problem(precision, training["device"])
        if problem:
            problems.append(f"config key '{key}': {problem} (training.device: {training['device']})")
    return problems


def model_fit_problems(config: dict, runnable: tuple[Cell, ...]) -> list[str]:
    """Every GPU cell's model and batch must fit a device of cluster.device_memory_gb (where given):
    the architecture's lower bound of what training needs (architecture.memory_floor_bytes),
    so only what certainly cannot fit is refused here; without the key the ranks check their
    device's free memory before building the model (train/loop.py)."""
    cluster, training = config["cluster"], config["training"]
    memory = cluster["device_memory_gb"]
    if memory is None or not cluster["gpus_per_node"] or training["device"] == "cpu":
        return []
    key = width_key(config["matrix"])
    problems, seen = [], set()
    for cell in runnable:
        width, trained = cell_model(config, cell)["width"], cell_training(config, cell)
        shards = cell.gpus if backends.spec(cell.framework, cell.backend).shards_state else 1
        itemsize = architecture.activation_itemsize(trained["precision"])
        needed = architecture.memory_floor_bytes(
            width, trained["batch_per_gpu"], tuple(config["dataset"]["image_size"]), itemsize, shards
        )
        if needed > memory * 2**30 and (width, trained["batch_per_gpu"], itemsize, shards) not in seen:
            seen.add((width, trained["batch_per_gpu"], itemsize, shards))
            problems.append(
                f"config key '{key}': width {width} ({architecture.parameter_count(width):,} parameters) with a "
                f"batch of {trained['batch_per_gpu']} ({trained['precision']}) needs at least "
                f"{needed / 2**30:.1f} GiB on each device, more than a GPU's {memory:g} GiB "
                f"(cluster.device_memory_gb; {cell.path}): use a smaller width or batch"
            )
    return problems


def synthetic_batch_problems(config: dict, runnable: tuple[Cell, ...]) -> list[str]:
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
    for cell in runnable:
        batch = cell_training(config, cell)["batch_per_gpu"]
        shard = n_train // cell.gpus
        if batch > shard and (batch, cell.gpus) not in seen:
            seen.add((batch, cell.gpus))
            problems.append(
                f"config key '{batch_key(cell)}': {batch} is larger than the shard of the "
                f"training set on {cell.gpus} ranks ({n_train} training pairs / {cell.gpus} = {shard})"
            )
    return problems


def profile_problems(config: dict, runnable: tuple[Cell, ...]) -> list[str]:
    """training.profile's window lies inside the run (its epoch within training.epochs, its steps
    within an epoch where the training set's size is known before preparation: synthetic data);
    that each framework's environment has its profiler is environment_problems'."""
    profile, training = config["training"]["profile"], config["training"]
    if profile is None:
        return []
    problems = []
    if profile["epoch"] > training["epochs"]:
        problems.append(
            f"config key 'training.profile.epoch': {profile['epoch']} is after the run's last epoch "
            f"(training.epochs = {training['epochs']})"
        )
    shortest = shortest_epoch(config, runnable)
    if shortest is not None and profile["steps"] > shortest[0]:
        steps, cell = shortest
        problems.append(
            f"config key 'training.profile.steps': {profile['steps']} is more than the {steps} steps an "
            f"epoch of {cell.framework}/{cell.backend} on {cell.gpus} GPUs has"
        )
    return problems


def environment_problems(config: dict, runnable: tuple[Cell, ...]) -> list[str]:
    """Each framework of the cells to run has its environment (environments.py), with Horovod built
    for it where a cell of backend horovod runs and its profiler where training.profile traces: asked
    of the environment itself (one short Python each, importing neither framework: Snakemake checks
    the config on every start), each missing part named with the command that installs it."""
    problems = []
    for framework in sorted({cell.framework for cell in runnable}):
        environment = environments.resolve(framework, config["environments"].get(framework))
        holds = environments.probe(environment)
        install = environments.install_command({framework})
        name = backends.FRAMEWORK_NAMES[framework]
        if holds.problem or not holds.framework:
            why = holds.problem or f"it has no {environments.PACKAGES[framework]} package"
            problems.append(
                f"config key 'matrix.frameworks': the {framework} cells need {environment.describe()}, and {why}: "
                f"install it with {install}, or set environments.{framework}, or leave {framework} out of "
                "matrix.frameworks"
            )
            continue
        for backend in sorted({cell.backend for cell in runnable if cell.framework == framework}):
            entry = backends.spec(framework, backend)
            if entry.package == "horovod" and not holds.horovod_framework:
                built = "a Horovod built without its " + name + " extension" if holds.horovod else "no Horovod"
                command = entry.package_install.format(install=install, python=environment.python, framework=framework)
                problems.append(
                    f"config key 'matrix.backends': backend {backend} of {framework} needs Horovod built for "
                    f"{name} in {environment.describe()}, which has {built}: install it with {command}, or "
                    f"leave {backend} out of matrix.backends"
                )
        if config["training"]["profile"] is not None and not holds.profiler:
            problems.append(
                f"config key 'training.profile': the {framework} cells cannot be traced: {environment.describe()} "
                f"has no profiler ({environments.PACKAGES[framework]}/{environments.PROFILERS[framework]})"
            )
    return problems


def shortest_epoch(config: dict, runnable: tuple[Cell, ...]) -> tuple[int, Cell] | None:
    """The fewest steps an epoch of any cell has and that cell, where the training set's size is
    known before it is prepared (synthetic data); else None."""
    dataset, training = config["dataset"], config["training"]
    if dataset["source"] != "synthetic":
        return None
    pairs = split_counts(dataset["synthetic"]["count"], dataset["test_fraction"], dataset["val_fraction"])[0]
    epochs = []
    for cell in runnable:
        resolved = cell_training(config, cell)
        passes = backward_passes(cell.framework, cell.backend, resolved)
        batches = batches_per_epoch(
            pairs * training["dataset_repeat"],
            cell.gpus,
            resolved["batch_per_gpu"],
            training["steps_per_epoch"],
            passes,
        )
        epochs.append((batches, cell))
    return min(epochs, key=lambda entry: entry[0]) if epochs else None


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


def folder_problems(config: dict) -> list[str]:
    """The folders other keys name, where set: budget.from's earlier study (the bill reads it,
    config/bill.py) and history.path (where `snakemake history` adds the finished study)."""
    found = []
    if config["budget"]["from"] is not None:
        found.append(earlier_study.folder_problem(config["budget"]["from"]))
    if config["history"]["path"] is not None:
        found.append(history_problem(config["history"]["path"]))
    return [problem for problem in found if problem]


def history_problem(folder: str) -> str | None:
    """Why history.path cannot hold the history of studies (naming the key), or None: a file is there,
    or a folder this user cannot write to, or one that cannot be created (its nearest existing parent is
    not a writable folder). Checked before any job, so a finished study never fails only at its end."""
    path = Path(folder).expanduser().absolute()
    key = "config key 'history.path'"
    if path.exists() and not path.is_dir():
        return f"{key}: {path} is not a folder (a file is there); name the folder that keeps the finished studies"
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{key}: {path} is a folder this user cannot write to (a study is added to it as a new folder)"
        return None
    parent = path.parent
    while not parent.exists():  # the root always exists
        parent = parent.parent
    if not parent.is_dir():
        return f"{key}: {path} cannot be created: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{key}: {path} cannot be created: this user cannot write to {parent}"
    return None


LAUNCHER_PLACEHOLDERS = (
    "ranks",
    "nodes",
    "ranks_per_node",
    "hosts",
    "master_addr",
    "port",
    "cpus_per_rank",
    "python",
    "container",
    "program",
    "scripts",
    "step_wait_s",
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


def uneven_nodes_problem(gpus: int, cluster: dict) -> str | None:
    """Why a cell of `gpus` ranks would leave its last node short (uneven), or None."""
    layout = node_layout(cluster, gpus)
    if len(set(layout)) > 1:
        return f"{gpus} GPUs cannot be spread evenly over {len(layout)} nodes of {ranks_per_node_limit(cluster)}"
    return None


def matrix_problems(config: dict, expanded: Matrix) -> list[str]:
    """A backend listed for none of the listed frameworks, or one that leaves no cell to run."""
    matrix, problems = config["matrix"], []
    runnable = expanded.cells()
    for backend in matrix["backends"]:
        if not any(backends.exists(framework, backend) for framework in matrix["frameworks"]):
            owners = ", ".join(backends.FRAMEWORK_NAMES[f] for f in backends.frameworks_of(backend))
            problems.append(
                f"config key 'matrix.backends': {backend} exists for none of matrix.frameworks "
                f"{matrix['frameworks']} (it is a {owners} backend; {backends.describe_registry()})"
            )
        elif not any(cell.backend == backend for cell in runnable):
            why = "; ".join(e.describe() for e in expanded.left_out() if e.backend == backend)
            problems.append(
                f"config key 'matrix.backends': no cell of {backend} can run with matrix.gpus {sorted(matrix['gpus'])} "
                f"({why}); give matrix.gpus a count it can run, or remove {backend}"
            )
    return problems
