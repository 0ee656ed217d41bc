"""A cell of the study: one training run of the matrix framework x backend x gpus x seed,
at the values of the optional axes the study sweeps (model width, batch per GPU, precision,
compression, compiled steps, strong scaling)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RUNS_ROOT = "results/runs"
# The source of this project's own cells in the tables; imported studies carry their legacy label.
OWN_SOURCE = "scalebench"

# The optional matrix axes, in the order their values appear in a cell's variant label.
AXES = ("model_width", "batch_per_gpu", "precision", "compression", "compile", "scaling")
# How each names its value in the label. A strong-scaling cell also carries its global batch
# (not an axis: one per study); weak scaling is named only where matrix.scaling lists it.
_LABELS = {
    "model_width": lambda value: f"width{value}",
    "batch_per_gpu": lambda value: f"batch{value}",
    "precision": str,
    "compression": lambda value: f"compress-{value}",
    "compile": lambda value: "compiled" if value else "eager",
    "scaling": str,
    "global_batch": lambda value: f"global{value}",
}


def width_key(matrix: Mapping[str, Any]) -> str:
    """The config key that sets a cell's model width, for a message that names it: matrix.model_width
    where the matrix sweeps it (`matrix`: the config's matrix section or a cell's axes), else model.width."""
    return "matrix.model_width" if "model_width" in matrix else "model.width"


def variant_label(axes: tuple[tuple[str, Any], ...]) -> str:
    """'width4_batch8_bf16', 'strong_global32', or '' for a cell without optional axes."""
    parts = [_LABELS[axis](value) for axis, value in axes]
    return "_".join(part for part in parts if part)


def cell_path(framework: str, backend: str, variant: str, gpus: int, seed: int) -> str:
    """{framework}/{backend}[/{variant}]/g{gpus}/s{seed}: a study without optional axes keeps
    the paths it always had."""
    middle = f"/{variant}" if variant else ""
    return f"{framework}/{backend}{middle}/g{gpus}/s{seed}"


@dataclass(frozen=True, order=True)
class Cell:
    framework: str
    backend: str
    gpus: int
    seed: int
    # the values that name this cell beyond the four keys, as (axis, value) pairs in AXES
    # order (plus global_batch for strong scaling); empty for a study without optional axes
    axes: tuple[tuple[str, Any], ...] = ()

    @property
    def variant(self) -> str:
        return variant_label(self.axes)

    @property
    def path(self) -> str:
        """The cell's folder below the runs root."""
        return cell_path(self.framework, self.backend, self.variant, self.gpus, self.seed)

    @property
    def folder(self) -> str:
        """The cell's folder relative to the working directory."""
        return f"{RUNS_ROOT}/{self.path}"

    def key(self) -> dict:
        """The columns that identify the cell in the tables."""
        return {
            "framework": self.framework,
            "backend": self.backend,
            "variant": self.variant,
            "gpus": self.gpus,
            "seed": self.seed,
        }

    def to_json(self) -> dict:
        """The cell as the settings JSON carries it (axes only where there are some: a study
        without optional axes keeps the settings its finished cells were trained with)."""
        data: dict[str, Any] = {
            "framework": self.framework,
            "backend": self.backend,
            "gpus": self.gpus,
            "seed": self.seed,
        }
        if self.axes:
            data["axes"] = [list(pair) for pair in self.axes]
        return data

    @classmethod
    def from_json(cls, data: dict) -> Cell:
        axes = tuple((str(axis), value) for axis, value in data.get("axes", []))
        return cls(data["framework"], data["backend"], int(data["gpus"]), int(data["seed"]), axes)


# The paths as Snakemake patterns, for the rules' wildcards (a variant is one folder level).
RUNS_PATTERN = f"{RUNS_ROOT}/{{framework}}/{{backend}}/g{{gpus}}/s{{seed}}"
RUNS_VARIANT_PATTERN = f"{RUNS_ROOT}/{{framework}}/{{backend}}/{{variant}}/g{{gpus}}/s{{seed}}"
VARIANT_REGEX = r"[a-z0-9][a-z0-9_.-]*"
