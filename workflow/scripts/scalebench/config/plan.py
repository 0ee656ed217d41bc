"""The study's plan: one immutable object per Snakemake start, with a method per question the rules ask.

Two stages, both built once per start (docs/design.md#one-plan):

- `Study`: the validated config (every default filled in), the schema's defaults and the matrix
  expanded once. rules/common.smk makes it before the first rule (`Study.validate`), so the rules
  can be written with the config's values.
- `StudyPlan`: the study with what planning found: this machine's GPUs (a local run), the cells that
  run (those SLURM refuses left out), the left-out cells with their reasons, each cell's freshness
  verdict, the finished cells, the run order's priorities. config/planning.py builds it, once the
  train rule exists (rules/train.smk), doing everything that acts on the world in one place.

Neither changes once made: the config is kept as JSON text and read back as a fresh copy, the
collections are tuples, frozensets and read-only mappings. The rules' input, params and
resource functions read them and change nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scalebench.cell import Cell, variant_label
from scalebench.config.cell_settings import train_settings
from scalebench.config.freshness import OUTPUTS, SETTINGS_FILE, Verdict
from scalebench.config.local_gpus import gpus_taken
from scalebench.config.matrix import LeftOut, Matrix, cell_problem
from scalebench.config.run_order import previous_block
from scalebench.config.seeds import ROUND_KEYS, SeedRule, seed_rule
from scalebench.config.validation import resolve, validate_study

OPTIONAL_AXES = "matrix.model_width, batch_per_gpu, precision, compression, scaling"


class PlanError(ValueError):
    """A question the plan refuses (a cell that cannot run), or a start it cannot plan; the message says why."""


@dataclass(frozen=True, eq=False)
class Study:
    """A validated study: its config with every default, the schema's defaults, its matrix expanded once."""

    config_text: str  # the config as JSON text: `config` reads a fresh copy, so no caller changes the study
    defaults_text: str
    matrix: Matrix

    @classmethod
    def validate(cls, config: dict, schema: dict, folders: bool = True) -> Study:
        """Validate `config` against `schema` and the checks across keys (ConfigError names the key);
        the matrix the checks expanded is the study's. `folders`: check the folders other keys name
        (checks.folder_problems), which only the process the user started reads."""
        resolved, matrix = validate_study(config, schema, folders)
        return cls(_canonical(resolved), _canonical(resolve({}, schema)), matrix)

    @property
    def config(self) -> dict:
        """The validated config (a copy)."""
        return json.loads(self.config_text)

    @property
    def defaults(self) -> dict:
        """Every key at its schema default (a copy): a key a finished cell's record lacks counts as this."""
        return json.loads(self.defaults_text)

    @property
    def seed_rule(self) -> SeedRule:
        """matrix.seeds read: a list, or the first seeds and the most of an adaptive study."""
        return seed_rule(self.config)

    @property
    def variants(self) -> Mapping[str, tuple[tuple[str, Any], ...]]:
        """The optional axes of each variant label of the study ('' without optional axes)."""
        return MappingProxyType({variant_label(axes): axes for axes in self.matrix.variants})

    def cell(self, framework: str, backend: str, gpus: int | str, seed: int | str, variant: str = "") -> Cell:
        """The cell these wildcards name; PlanError for a variant this study does not have."""
        variants = self.variants
        if variant not in variants:
            known = ", ".join(label or "(none)" for label in variants)
            raise PlanError(
                f"{variant!r} is not a variant of this study's optional axes ({OPTIONAL_AXES}); its variants: {known}"
            )
        return Cell(framework, backend, int(gpus), int(seed), variants[variant])

    def cell_of(self, framework: str, backend: str, gpus: int | str, seed: int | str, variant: str = "") -> Cell:
        """The cell these wildcards name; PlanError where the config leaves it out (config/matrix.py's
        reasons; StudyPlan.cell_of adds this machine's GPUs and SLURM's refusals)."""
        cell = self.cell(framework, backend, gpus, seed, variant)
        reason = cell_problem(self.config, cell)
        if reason:
            raise PlanError(f"{cell.path} cannot run: {reason}")
        return cell

    def settings(self, cell: Cell) -> dict:
        """The settings the cell's job starts with (its settings.json)."""
        return train_settings(self.config, cell)

    def default_settings(self, cell: Cell) -> dict:
        """The cell's settings with every key at its schema default (config.settings_changes)."""
        return train_settings(self.defaults, cell)


@dataclass(frozen=True, eq=False)
class StudyPlan:
    """What one Snakemake start plans (config/planning.py builds it; see the module's docstring)."""

    study: Study
    machine_gpus: int | None  # a local run's GPUs (config/local_gpus.py); None on a cluster and in a job
    cells: tuple[Cell, ...]  # the cells that run, in the matrix's order
    left_out: tuple[LeftOut, ...]
    refused: Mapping[Cell, str] = field(default_factory=dict)  # SLURM's refusals (config/slurm_check.py)
    verdicts: Mapping[Cell, Verdict] = field(default_factory=dict)  # what planning found in each folder
    finished: frozenset[Cell] = frozenset()  # both outputs there, and not to be retrained
    priorities: Mapping[Cell, int] = field(default_factory=dict)  # config/run_order.py
    # the cells the rounds of matrix.seeds {initial, max} could add (config/seeds.py round_cells):
    # planned (settings.json) like `cells`, trained only where a round adds them
    round_cells: tuple[Cell, ...] = ()

    def __post_init__(self) -> None:
        # copies, read-only: the plan stays as planned whatever its maker does with its own dicts
        for name in ("refused", "verdicts", "priorities"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "left_out", tuple(self.left_out))
        object.__setattr__(self, "round_cells", tuple(self.round_cells))
        object.__setattr__(self, "finished", frozenset(self.finished))
        object.__setattr__(self, "_running", frozenset(self.cells))

    @property
    def config(self) -> dict:
        """The validated config (a copy)."""
        return self.study.config

    @property
    def possible(self) -> tuple[Cell, ...]:
        """The cells that run and those a round could add."""
        return self.cells + self.round_cells

    def round_cells_of(self, keys: tuple[dict, ...]) -> list[Cell]:
        """The cells a round's file names (config/seeds.py ROUND_KEYS); PlanError for one the plan has
        neither among its cells nor among those a round could add (a round file of another study)."""
        possible = set(self.possible)
        found = []
        for key in keys:
            cell = self.study.cell(*(key[name] for name in ("framework", "backend", "gpus", "seed", "variant")))
            if cell not in possible:
                raise PlanError(
                    f"{cell.path} is named by a round of matrix.seeds but is no cell this study's rounds can add; "
                    "remove results/plan/rounds/ to decide the rounds again"
                )
            found.append(cell)
        return found

    def problem(self, cell: Cell) -> str | None:
        """Why `cell` cannot run (config/matrix.py's reasons, this machine's GPUs, SLURM's refusal), or None."""
        if cell in self._running:
            return None
        return cell_problem(self.config, cell, self.machine_gpus, self.refused)

    def cell_of(self, framework: str, backend: str, gpus: int | str, seed: int | str, variant: str = "") -> Cell:
        """The cell of a train job's wildcards; PlanError where it cannot run (before any submission)."""
        cell = self.study.cell(framework, backend, gpus, seed, variant)
        reason = self.problem(cell)
        if reason:
            raise PlanError(f"{cell.path} cannot run: {reason}")
        return cell

    def outputs(self, name: str) -> list[str]:
        """One path per cell that runs, e.g. outputs('metrics.jsonl')."""
        return [f"{cell.folder}/{name}" for cell in self.cells]

    def analysis_outputs(self, name: str) -> list[str]:
        """Every cell's output, or with `partial: true` only those of the finished cells: the DAG then
        holds no job for the others (nothing reruns them), and collect_runs lists them as missing or failed."""
        if not self.config["partial"]:
            return self.outputs(name)
        return [f"{cell.folder}/{name}" for cell in self.possible if cell in self.finished]

    def priority(self, cell: Cell) -> int:
        """The cell's train job's Snakemake priority (0 without order.seed, or for a cell outside the order)."""
        return self.priorities.get(cell, 0)

    def previous_block(self, cell: Cell) -> list[Cell]:
        """With order.blocks, the cells that finish before `cell` starts; else none."""
        config = self.config
        if not config["order"]["blocks"]:
            return []
        return previous_block(cell, self.cells, self.study.seed_rule.blocks)

    def local_gpus(self, gpus: int) -> int:
        """The GPUs a cell of `gpus` devices holds on this machine (the local scheduler's resource)."""
        return gpus_taken(self.config["training"]["device"], gpus, self.machine_gpus or 0)

    def settings(self, cell: Cell) -> dict:
        """The settings the cell's job starts with (its settings.json)."""
        return self.study.settings(cell)

    def default_settings(self, cell: Cell) -> dict:
        """The cell's settings with every key at its schema default."""
        return self.study.default_settings(cell)

    @staticmethod
    def settings_file(cell: Cell) -> str:
        """The cell's settings.json: the train rule's input, written and dated by planning."""
        return f"{cell.folder}/{SETTINGS_FILE}"

    def cells_json(self) -> str:
        """Each cell's keys, settings and default settings: collect_runs marks a cell that trained with
        other settings stale (with partial=true; otherwise planning has it retrained). With rounds,
        also the cells a round could add: the analysis keeps those a round added (analysis/rounds.py)."""
        config, defaults = self.config, self.study.defaults
        return json.dumps(
            [
                {**cell.key(), "settings": train_settings(config, cell), "defaults": train_settings(defaults, cell)}
                for cell in self.possible
            ],
            sort_keys=True,
        )

    def possible_keys_json(self) -> str:
        """The keys of every cell the study can run, a round's too: the answer replays the rounds
        (analysis/rounds.py) with what they could add."""
        return self.keys_json(self.possible)

    @staticmethod
    def keys_json(cells: Iterable[Cell]) -> str:
        """The keys of `cells` (config/seeds.py ROUND_KEYS): a round's script reads those of the cells
        it reads (rules/common.smk round_read)."""
        return json.dumps([{name: cell.key()[name] for name in ROUND_KEYS} for cell in cells])

    def left_out_json(self) -> str:
        """The left-out cells with their reasons, for the report's table."""
        return json.dumps([dataclasses.asdict(entry) for entry in self.left_out])


def outputs_exist(cell: Cell) -> bool:
    """Both outputs of the cell's train job are in its folder (whatever its status)."""
    return all((Path(cell.folder) / name).exists() for name in OUTPUTS)


def finished_cells(cells: tuple[Cell, ...], verdicts: Mapping[Cell, Verdict]) -> frozenset[Cell]:
    """The cells whose outputs exist and that planning does not retrain (its settings changed, or its
    outputs are incomplete: partial keeps those out of the analysis)."""
    return frozenset(
        cell for cell in cells if outputs_exist(cell) and not (cell in verdicts and verdicts[cell].retrain)
    )


def _canonical(config: dict) -> str:
    return json.dumps(config)  # in its own key order: the rules read the config as validation left it
