"""Which distributed backends exist for which framework, and how each starts its processes.

The one registry: adding a backend is its module (one per framework) and one entry here that
names it by its dotted path (`modules`), which is the module the rank imports (train/entry.py).
Every fact about a backend is its entry's, and the planner and the ranks' classes read it here
(Backend.spec). Everything else derives from the entry: the schema's matrix.backends enum and the
launch templates per executor (filled in when the schema is loaded, config/registry_schema.py),
config validation (which pairs of the matrix run), the rules' wildcard constraints, the
launcher (how many processes a cell starts), the SLURM resources, the report's legend labels
and colours (report/style.py), the docs' backends table (tools/backends_table.py) and the
contract test (each entry's modules define its class; no class restates a fact of its entry).
Plain Python, no framework imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}


@dataclass(frozen=True)
class Upstream:
    """Where a backend's library stands upstream, as read on `checked` from its repository and
    trackers. The README, the user guide and the report say it in one generated sentence
    (`upstream_status`): a result of a library nobody releases any more is weighed differently."""

    project: str  # its name, as the sentence starts: "Horovod"
    last_release: str  # its newest release, the version tools/build_horovod.sh builds
    released: str  # that release's date (its tag): "2023-06-12"
    last_commit: str  # the date of its newest commit on its default branch
    last_commit_did: str  # what that commit did
    open_fix: str  # a fix this project needs that upstream has not merged
    open_since: str  # since when it waits (year-month)
    checked: str  # the date the facts above were read
    fixes_here: str = ""  # where this project keeps the fixes it applies instead, if any


@dataclass(frozen=True)
class BackendSpec:
    name: str
    summary: str  # what it is, for messages
    good_for: str = ""  # what a study compares it for (the user guide's table)
    # its module in each framework that has it, as a dotted path: the rank imports exactly that
    # (train/entry.py), so a backend's name never has to be a file name beside the framework's own
    modules: dict[str, str] = field(default_factory=dict)
    # one process drives every device of its (single) node: nn.DataParallel, MirroredStrategy
    one_process: bool = False
    min_ranks: int = 1  # the fewest GPUs (replicas) a cell of it can have: the planner leaves out, a rank refuses
    min_ranks_reason: str = ""
    # the most devices it can drive without GPUs (None: as many as the node has ranks), and why: the
    # planner leaves out, a CPU rank refuses (train/preflight.py)
    cpu_devices: int | None = None
    cpu_reason: str = ""
    # why it cannot reduce gradients in fp16 (training.compression: fp16); "" where it can
    compression_reason: str = ""
    # why its steps cannot be compiled (training.compile: true); "" where they can
    compile_reason: str = ""
    # it adds up training.horovod.backward_passes_per_step batches' gradients before each reduction
    accumulates: bool = False
    # its ranks share the model's weights, gradients and optimizer state (each holds 1/processes of
    # them): the planner's memory check (config/checks.py) and the rank's (train/preflight.py) read it
    shards_state: bool = False
    # the report's legend: its name and colour (one per backend name, in every framework)
    label: str = ""
    colour: str = ""
    # how its ranks start: a key of LAUNCH_TEMPLATES ("" = one_process or per_device, as one_process says)
    launch: str = ""
    # the Python package it needs beyond its framework, which an install may leave out
    # (SCALEBENCH_HOROVOD=0 ./install.sh), and the command that installs it: a study that asks for
    # the backend where the package is missing is refused before any job (config/checks.py)
    package: str = ""
    package_install: str = ""
    upstream: Upstream | None = None

    @property
    def launch_kind(self) -> str:
        return self.launch or (ONE_PROCESS if self.one_process else PER_DEVICE)

    def module(self, framework: str) -> str:
        """The dotted path of its module in `framework`."""
        if framework not in self.modules:
            raise KeyError(f"backend {self.name} names no module for {framework} (BackendSpec.modules)")
        return self.modules[framework]


# How a cell's processes start, per executor (the defaults of config key launchers.<executor>.
# <framework>_<name>; placeholders in config/schema.yaml's description of launchers), and a note
# on each for the configuration reference. {python} is the cell's framework's environment
# (scalebench/environments.py); {container} enters its image where environments.<framework>.image
# names one (empty without): locally the launcher and its ranks run inside it, under SLURM each of
# srun's tasks does.
PER_DEVICE, PROCESSES, HOROVOD_RUN, ONE_PROCESS = "per_device", "processes", "horovod", "one_process"
_SRUN = (
    "srun --immediate={step_wait_s} --kill-on-bad-exit=1 --nodes={nodes} --ntasks={ranks} --ntasks-per-node={ranks_per_node} "
    "--cpus-per-task={cpus_per_rank} {container} {python} {program}"
)
LAUNCH_TEMPLATES = {
    "local": {
        PER_DEVICE: "{container} {python} -m torch.distributed.run --nnodes=1 --nproc-per-node={ranks} "
        "--master-addr={master_addr} --master-port={port} {program}",
        PROCESSES: "{container} {python} {scripts}/local_ranks.py --ranks {ranks} --master-addr {master_addr} "
        "--master-port {port} {python} {program}",
        HOROVOD_RUN: "{container} {python} {scripts}/horovod_run.py --gloo -np {ranks} -H {hosts} {python} {program}",
        ONE_PROCESS: "{container} {python} {program}",
    },
    "slurm": {
        PER_DEVICE: _SRUN,
        PROCESSES: _SRUN,
        HOROVOD_RUN: "{container} {python} {scripts}/horovod_srun.py --ranks {ranks} -- " + _SRUN,
        ONE_PROCESS: _SRUN,
    },
}
LAUNCH_NOTES = {
    "local": {
        PER_DEVICE: "torchrun (torch.distributed.run) starts one process per GPU.",
        PROCESSES: "local_ranks.py starts one process per GPU with torchrun's variables (TensorFlow's "
        "environment has no torchrun: it is part of torch).",
        HOROVOD_RUN: "horovodrun starts the ranks, through horovod_run.py: without the probe of TensorFlow's "
        "Horovod extension it runs before each launch (each rank checks the build itself).",
        ONE_PROCESS: "one process for all the cell's GPUs.",
    },
    "slurm": {
        PER_DEVICE: "srun starts one task per GPU.",
        PROCESSES: "srun starts one task per GPU.",
        HOROVOD_RUN: "srun starts the ranks, horovod_srun.py runs the rendezvous (no ssh).",
        ONE_PROCESS: "srun starts one task with all the cell's GPUs and CPUs ({ranks} is 1).",
    },
}


# TensorFlow's all-reduce takes tf.distribute.experimental.CommunicationOptions, which has
# bytes_per_pack, timeout_seconds and implementation: no option to send gradients in another type
TF_COLLECTIVES_REASON = (
    "TensorFlow's collectives have no gradient compression: tf.distribute.experimental.CommunicationOptions "
    "has bytes_per_pack, timeout_seconds and implementation, and no compression option it would need; "
    "use backend horovod (hvd.Compression.fp16) to compare fp16 gradients"
)

# native is DDP in PyTorch's panel and MultiWorkerMirroredStrategy in TensorFlow's: one label
NATIVE_TORCH = BackendSpec(
    "native",
    "DistributedDataParallel, one process per GPU",
    good_for="each framework's own multi-node data parallelism: the reference",
    modules={"torch": "scalebench.train.torch.native"},
    label="native",
    colour="#1b6ca8",
)
NATIVE_TF = BackendSpec(
    "native",
    "MultiWorkerMirroredStrategy, one process per GPU",
    good_for="each framework's own multi-node data parallelism: the reference",
    modules={"tensorflow": "scalebench.train.tf.native"},
    launch=PROCESSES,
    compression_reason=TF_COLLECTIVES_REASON,
    label="native",
    colour="#1b6ca8",
)
HOROVOD = BackendSpec(
    "horovod",
    "Horovod allreduce, one process per GPU",
    good_for="the same exchange in both frameworks; gradient accumulation (`training.horovod`)",
    modules={"torch": "scalebench.train.torch.horovod", "tensorflow": "scalebench.train.tf.horovod"},
    accumulates=True,
    label="Horovod",
    colour="#d95f02",
    launch=HOROVOD_RUN,
    package="horovod",
    package_install="{install} (it builds Horovod in each framework's environment unless SCALEBENCH_HOROVOD=0), or tools/build_horovod.sh {python} {framework}",
    upstream=Upstream(
        project="Horovod",
        last_release="0.28.1",
        released="2023-06-12",
        last_commit="2026-06-20",
        last_commit_did="turned off its scheduled CI",
        open_fix="its build fix for TensorFlow 2.20 (horovod/horovod#4302)",
        open_since="2025-09",
        checked="2026-11-27",
        fixes_here="tools/horovod_fixes.py",
    ),
)
FSDP = BackendSpec(
    "fsdp",
    "FullyShardedDataParallel, one process per GPU, parameters and gradients sharded across ranks",
    good_for="memory per GPU against DDP's speed; the successor of FairScale's FSDP",
    modules={"torch": "scalebench.train.torch.fsdp"},
    min_ranks=2,
    min_ranks_reason="fsdp needs at least 2 ranks (with one there is nothing to shard)",
    shards_state=True,
    label="FSDP",
    colour="#1b9e77",
)
DP = BackendSpec(
    "dp",
    "nn.DataParallel, one process driving every GPU of one node",
    good_for="the single-node baseline DDP is usually compared with",
    modules={"torch": "scalebench.train.torch.dp"},
    one_process=True,
    cpu_devices=1,
    cpu_reason="dp splits a batch over GPUs only; on the CPU it has one device",
    compression_reason=(
        "nn.DataParallel is one process: its replicas' gradients are added up on the first GPU in "
        "backward, with no allreduce between ranks to compress"
    ),
    compile_reason=(
        "nn.DataParallel copies the model to every GPU and runs the copies in threads in each forward, "
        "which torch.compile does not trace; compare compiled steps with backend native (DDP)"
    ),
    label="DataParallel",
    colour="#7570b3",
)
MIRRORED = BackendSpec(
    "mirrored",
    "MirroredStrategy, one process driving every GPU of one node (logical CPU devices without GPUs)",
    good_for="TensorFlow's single-node strategy beside the multi-worker one (`native`)",
    modules={"tensorflow": "scalebench.train.tf.mirrored"},
    one_process=True,
    compression_reason=TF_COLLECTIVES_REASON,
    label="Mirrored",
    colour="#e7298a",
)

REGISTRY: dict[str, dict[str, BackendSpec]] = {
    "torch": {spec.name: spec for spec in (NATIVE_TORCH, HOROVOD, FSDP, DP)},
    "tensorflow": {spec.name: spec for spec in (NATIVE_TF, HOROVOD, MIRRORED)},
}
FRAMEWORKS = tuple(REGISTRY)


def names() -> tuple[str, ...]:
    """Every backend name, in registry order (the schema's enum, the rules' wildcard constraint)."""
    return tuple(dict.fromkeys(name for backends in REGISTRY.values() for name in backends))


BACKENDS = names()
COMPRESSIONS = ("none", "fp16")  # training.compression


def legend() -> dict[str, tuple[str, str]]:
    """Each backend name's legend label and colour; an entry that names a backend differently in
    another framework is an error here, not a second legend entry in a figure."""
    legend: dict[str, tuple[str, str]] = {}
    for backends in REGISTRY.values():
        for name, entry in backends.items():
            shown = (entry.label or name, entry.colour)
            if legend.setdefault(name, shown) != shown:
                raise ValueError(f"backend {name} has two legend entries: {legend[name]} and {shown}")
    return legend


def launch_template(executor: str, framework: str, backend: str) -> str:
    """The default command that starts a cell's ranks (config key launchers.<executor>.<framework>_<backend>)."""
    return LAUNCH_TEMPLATES[executor][spec(framework, backend).launch_kind]


def default_launchers() -> dict[str, dict[str, str]]:
    """Config key launchers as the schema's defaults fill it: each executor's template for every
    framework_backend pair (for a command built without a study's config)."""
    return {
        executor: {
            f"{framework}_{name}": launch_template(executor, framework, name)
            for framework, entries in REGISTRY.items()
            for name in entries
        }
        for executor in LAUNCH_TEMPLATES
    }


def launch_note(executor: str, framework: str, backend: str) -> str:
    entry = spec(framework, backend)
    return f"{FRAMEWORK_NAMES[framework]} {entry.summary}: {LAUNCH_NOTES[executor][entry.launch_kind]}"


def exists(framework: str, backend: str) -> bool:
    return backend in REGISTRY.get(framework, {})


def spec(framework: str, backend: str) -> BackendSpec:
    return REGISTRY[framework][backend]


def module(framework: str, backend: str) -> str:
    """The dotted path of `backend`'s module in `framework` (what the rank imports)."""
    return spec(framework, backend).module(framework)


def frameworks_of(backend: str) -> list[str]:
    """The frameworks that have `backend`, in registry order."""
    return [framework for framework, backends in REGISTRY.items() if backend in backends]


def compression_problem(framework: str, backend: str, compression: str) -> str | None:
    """Why `backend` of `framework` cannot reduce its gradients with `compression`; None where it can."""
    if compression not in COMPRESSIONS:
        return f"compression {compression!r} is unknown (one of {', '.join(COMPRESSIONS)})"
    reason = spec(framework, backend).compression_reason
    if compression == "none" or not reason:
        return None
    return f"compression {compression} is not available for {FRAMEWORK_NAMES[framework]} backend {backend}: {reason}"


# XLA has no deterministic max-pooling gradient: TensorFlow refuses jit_compile under op determinism
TF_DETERMINISTIC_COMPILE_REASON = (
    "XLA has no deterministic implementation of the UNet's max-pooling gradient; set "
    "training.deterministic: false to compile TensorFlow steps"
)


def compile_problem(framework: str, backend: str, compile_steps: bool, deterministic: bool | None = None) -> str | None:
    """Why `backend` of `framework` cannot compile its steps; None where it can (or need not).
    deterministic: training.deterministic (null resolves at the rank: on for CPU ranks, which
    then refuse a compiled TensorFlow step before the first step)."""
    if not compile_steps:
        return None
    reason = spec(framework, backend).compile_reason
    if not reason and framework == "tensorflow" and deterministic:
        reason = TF_DETERMINISTIC_COMPILE_REASON
    if not reason:
        return None
    return f"compiled steps are not available for {FRAMEWORK_NAMES[framework]} backend {backend}: {reason}"


def precision_problem(precision: str, device_type: str) -> str | None:
    """Why `precision` cannot run on a `device_type` device; None where it can. Neither framework
    autocasts to float16 on the CPU (bf16 does run there)."""
    if precision == "fp16" and device_type == "cpu":
        return "fp16 needs a GPU; use bf16 on the CPU"
    return None


def describe_registry() -> str:
    """'PyTorch: native, horovod, fsdp, dp; TensorFlow: native, horovod, mirrored', for messages."""
    return "; ".join(f"{FRAMEWORK_NAMES[f]}: {', '.join(backends)}" for f, backends in REGISTRY.items())


def processes(framework: str, backend: str, gpus: int) -> int:
    """How many processes the launcher starts for a cell of `gpus` devices (the ranks' Backend.processes)."""
    return 1 if spec(framework, backend).one_process else gpus


def devices_per_process(framework: str, backend: str, gpus: int) -> int:
    """The devices each process of the cell drives: 1, or all of the cell's for a one-process backend."""
    return gpus // processes(framework, backend, gpus)


def backward_passes(framework: str, backend: str, passes_per_step: int) -> int:
    """Batches per optimizer step: `passes_per_step` (training.horovod.backward_passes_per_step)
    for a backend that accumulates, else 1. The planner, the analysis and the ranks' backend read it."""
    return passes_per_step if spec(framework, backend).accumulates else 1


def about() -> dict[str, str]:
    """Each backend name and what it is in every framework that has it, for the report's text."""
    told: dict[str, dict[str, list[str]]] = {}  # name -> what it is -> the frameworks it is that in
    for framework, entries in REGISTRY.items():
        for name, entry in entries.items():
            what = entry.summary + (f", from {entry.min_ranks} GPUs" if entry.min_ranks > 1 else "")
            told.setdefault(name, {}).setdefault(what, []).append(FRAMEWORK_NAMES[framework])
    return {
        name: " / ".join(
            f"{frameworks[0]} {what}" if len(frameworks) == 1 else f"{what} ({', '.join(frameworks)})"
            for what, frameworks in kinds.items()
        )
        for name, kinds in told.items()
    }


def upstream_status() -> dict[str, str]:
    """Per backend name whose library has upstream facts, the one sentence that says where it stands
    (the README, the user guide and the report print it: tools/backends_table.py --write)."""
    said: dict[str, str] = {}
    for entries in REGISTRY.values():
        for name, entry in entries.items():
            facts = entry.upstream
            if facts is None or name in said:
                continue
            ours = f"; scalebench builds {facts.last_release} with fixes of its own ({facts.fixes_here})"
            said[name] = (
                f"{facts.project} has had no release since {facts.last_release} ({facts.released}): its last "
                f"upstream commit ({facts.last_commit}) {facts.last_commit_did}, and {facts.open_fix} has been "
                f"an open pull request since {facts.open_since} (as of {facts.checked})"
                f"{ours if facts.fixes_here else ''}."
            )
    return said


def guide_rows() -> dict[str, list[str]]:
    """Per backend name, the user guide's columns: its frameworks, what it is, what it is good for,
    its processes and SLURM shape, and the cells it leaves out or refuses, from its entries' facts."""
    rows: dict[str, list[str]] = {}
    for name, what in about().items():
        entries = [REGISTRY[framework][name] for framework in frameworks_of(name)]
        entry = entries[0]
        if entry.one_process:
            shape = "one per cell; one task on one node with all its GPUs and the CPUs and memory of as many ranks"
        else:
            shape = "one per GPU; one task per GPU, as many nodes as needed"
        limits = []
        if entry.min_ranks > 1:
            limits.append(f"cells of fewer than {entry.min_ranks} GPUs, left out: {entry.min_ranks_reason}")
        if entry.one_process:
            limits.append("more GPUs than a node has (`cluster.gpus_per_node`), left out")
        if entry.cpu_devices is not None:
            limits.append(f"more than {entry.cpu_devices} device without GPUs, left out: {entry.cpu_reason}")
        for framework, each in zip(frameworks_of(name), entries, strict=True):
            if each.compression_reason:
                limits.append(f"{FRAMEWORK_NAMES[framework]} fp16 gradients (`training.compression`), refused")
            if each.compile_reason:
                limits.append(f"{FRAMEWORK_NAMES[framework]} compiled steps (`training.compile`), refused")
        rows[name] = [
            ", ".join(FRAMEWORK_NAMES[framework] for framework in frameworks_of(name)),
            what,
            " / ".join(dict.fromkeys(each.good_for for each in entries if each.good_for)),
            shape,
            "; ".join(limits) or "—",
        ]
    return rows


def guide_table() -> str:
    """The user guide's table of backends (docs/user-guide.md, written by tools/backends_table.py)."""
    lines = [
        "| backend | frameworks | what it is | good for | processes and SLURM shape | left out or refused |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| `{name}` | {' | '.join(columns)} |" for name, columns in guide_rows().items()]
    return "\n".join(lines)


def markdown_table() -> str:
    """The docs' table of backends (docs/backends.md, written by tools/backends_table.py)."""
    lines = [
        "| framework | backend | legend | what it is | processes | smallest world | fp16 gradients | compiled steps |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for framework, entries in REGISTRY.items():
        for name, entry in entries.items():
            processes = "one for all the cell's GPUs" if entry.one_process else "one per GPU"
            lines.append(
                f"| {FRAMEWORK_NAMES[framework]} | `{name}` | {legend()[name][0]} | {entry.summary} | {processes} | "
                f"{entry.min_ranks} | {'no' if entry.compression_reason else 'yes'} | "
                f"{'no' if entry.compile_reason else 'yes'} |"
            )
    return "\n".join(lines)
