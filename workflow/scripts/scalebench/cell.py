"""A cell of the study: one training run of the matrix framework x backend x gpus x seed."""

from __future__ import annotations

from dataclasses import dataclass

RUNS_ROOT = "results/runs"
# The source of this project's own cells in the tables; imported studies carry their legacy label.
OWN_SOURCE = "scalebench"


@dataclass(frozen=True, order=True)
class Cell:
    framework: str
    backend: str
    gpus: int
    seed: int

    @property
    def path(self) -> str:
        """The cell's folder below the runs root: {framework}/{backend}/g{gpus}/s{seed}."""
        return f"{self.framework}/{self.backend}/g{self.gpus}/s{self.seed}"

    @property
    def folder(self) -> str:
        """The cell's folder relative to the working directory."""
        return f"{RUNS_ROOT}/{self.path}"


# The same path as a Snakemake pattern, for the rules' wildcards.
RUNS_PATTERN = f"{RUNS_ROOT}/{{framework}}/{{backend}}/g{{gpus}}/s{{seed}}"
