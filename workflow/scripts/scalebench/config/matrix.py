"""The cells of the matrix: every combination of frameworks, backends, optional axes, GPU counts
and seeds, those that run, and those left out with the reason (cell_problem)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from scalebench import backends
from scalebench.cell import AXES, Cell
from scalebench.config.cell_settings import cell_training
from scalebench.config.local_gpus import problem as local_gpu_problem
from scalebench.config.resources import ranks_per_node_limit
from scalebench.config.seeds import seed_rule


def cell_problem(
    config: dict, cell: Cell, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None
) -> str | None:
    """Why the matrix leaves `cell` out, or None when it runs.

    A pair that does not exist; fewer ranks than the backend needs (fsdp on 1); a backend
    that drives one node from one process (dp, mirrored) on more devices than a node has;
    dp on more than one device where the config says there are no GPUs (training.device:
    cpu, or a CPU-only cluster); a gradient compression or compiled steps the backend does not have; a
    strong-scaling global batch that does not divide over the cell's GPUs. With
    `machine_gpus` (a local run: config/local_gpus.py), more GPUs than this machine has; with
    `refused`, a job SLURM refuses (its reason there: config/slurm_check.py).
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
    local = local_gpu_problem(device, gpus, machine_gpus) if machine_gpus is not None else None
    return local or (refused or {}).get(cell)


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


def _every_cell(config: dict, combos: list[tuple[tuple[str, Any], ...]]) -> Iterator[Cell]:
    matrix = config["matrix"]
    # the first seeds of an adaptive study (matrix.seeds {initial, max}); its rounds add the others
    seeds = seed_rule(config).initial
    for framework, backend, axes, gpus, seed in itertools.product(
        matrix["frameworks"], matrix["backends"], combos, sorted(matrix["gpus"]), seeds
    ):
        yield Cell(framework, backend, gpus, seed, axes)


@dataclass(frozen=True)
class Matrix:
    """The matrix expanded once (`expand`): every combination in a stable order with why the config
    leaves it out (None where it runs). A machine's GPUs and SLURM's refusals are laid over it
    without expanding it again: the plan (config/plan.py) and the checks (config/checks.py) share one."""

    combinations: tuple[tuple[Cell, str | None], ...]
    variants: tuple[tuple[tuple[str, Any], ...], ...]
    gpu_counts: tuple[int, ...]  # matrix.gpus, sorted
    device: str  # training.device: with a machine's GPU count it decides what a local cell holds

    def _problem(
        self, cell: Cell, reason: str | None, machine_gpus: int | None, refused: Mapping[Cell, str] | None
    ) -> str | None:
        """cell_problem's answer for a combination whose config reason is `reason`."""
        local = local_gpu_problem(self.device, cell.gpus, machine_gpus) if machine_gpus is not None else None
        return reason or local or (refused or {}).get(cell)

    def cells(self, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None) -> tuple[Cell, ...]:
        """Every cell that runs (machine_gpus, refused: as cell_problem's), in the matrix's order."""
        return tuple(
            cell for cell, reason in self.combinations if self._problem(cell, reason, machine_gpus, refused) is None
        )

    def reasons(
        self, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None
    ) -> tuple[tuple[Cell, str | None], ...]:
        """Every combination with why it does not run (None where it runs), in the matrix's order."""
        return tuple((cell, self._problem(cell, reason, machine_gpus, refused)) for cell, reason in self.combinations)

    def left_out(
        self, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None
    ) -> tuple[LeftOut, ...]:
        """The cells that do not run, grouped by pair, variant and reason."""
        reasons: dict[tuple, list[int]] = {}
        for cell, reason in self.combinations:
            why = self._problem(cell, reason, machine_gpus, refused)
            if why:
                counts_of = reasons.setdefault((cell.framework, cell.backend, cell.variant, why), [])
                if cell.gpus not in counts_of:
                    counts_of.append(cell.gpus)
        return tuple(
            LeftOut(framework, backend, tuple(gpus), reason, list(gpus) == list(self.gpu_counts), variant)
            for (framework, backend, variant, reason), gpus in reasons.items()
        )


def expand(config: dict) -> Matrix:
    """The matrix of a validated config, expanded: the one expansion a Snakemake start makes
    (validation checks it, the plan reads it)."""
    combos = variants(config)
    return Matrix(
        tuple((cell, cell_problem(config, cell)) for cell in _every_cell(config, combos)),
        tuple(combos),
        tuple(sorted(config["matrix"]["gpus"])),
        config["training"]["device"],
    )


def left_out(config: dict, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None) -> list[LeftOut]:
    """The cells of the matrix that do not run, grouped by pair, variant and reason (machine_gpus,
    refused: as cell_problem's)."""
    return list(expand(config).left_out(machine_gpus, refused))


def cells(config: dict, machine_gpus: int | None = None, refused: Mapping[Cell, str] | None = None) -> list[Cell]:
    """Every cell of the matrix that runs (see left_out for the others), in a stable order."""
    return list(expand(config).cells(machine_gpus, refused))
