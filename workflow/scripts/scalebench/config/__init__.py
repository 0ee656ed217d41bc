"""Validate the study configuration and expand it into cells.

The JSON schema (config/schema.yaml) fills defaults and rejects unknown keys and
bad values; the checks cover what a schema cannot express. Every error names the
config key, and all of it runs before Snakemake builds a job. A Snakemake start builds one
plan (plan.py) in one place (planning.py), which the rules only read. One module per job:

- coercion.py: `--config` strings to the schema's types;
- registry_schema.py: the schema's backend enum and launch templates, from the registry;
- validation.py: the schema, with defaults and removed keys;
- checks.py: the checks across keys (and the labels of imported studies);
- matrix.py: the matrix expanded once: the cells, and those left out with the reason;
- plan.py: the study's plan, immutable, with a method per question the rules ask (cells, variants, left-out cells, verdicts, priorities);
- planning.py: bill_study (read before anything acts) and plan_study, the one place where planning acts (settings files, the SLURM pre-flight, the plugin's patch, the bill written and said, the stamp, the warnings);
- bill.py: the bill: each cell finished, held by a live job or to run, the cells to run predicted, their GPU-hours and time limits, bill.csv and its line, the budget;
- prediction.py: a cell's run predicted from finished cells of its series through the scaling model, else the cluster.time formula;
- earlier_study.py: an earlier study's finished cells (budget.from, compare.baseline) and whether they ran a cell's work alike;
- cell_settings.py: one cell's settings and what changed since it trained;
- freshness.py: whether a finished cell still stands (each cell's settings.json), the analysis' stamp;
- local_gpus.py: this machine's GPUs as a Snakemake resource, for a local run;
- resources.py: a cell's SLURM job (nodes, tasks, GPUs, CPUs, memory, time);
- slurm_check.py: the requests SLURM would refuse, found before any submission (`sbatch --test-only`);
- slurm_plugin.py: the SLURM plugin patched for the version it was written for (another refused): a refusal ends its job, a busy controller is asked again, a round's jobs are submitted by priority;
- run_order.py: the order the cells start in (order.seed, order.blocks): priorities, blocks.
- seeds.py: matrix.seeds' two forms (a list, or {initial, max} and the rounds), what the rounds decide by (Rules), where the answer's comparisons are (answer_scope), the cells a round could add, the rounds' files.

The rules and the analysis read the names below from here.
"""

from scalebench.backends import BACKENDS, FRAMEWORKS
from scalebench.cell import Cell
from scalebench.config.cell_settings import cell_training, settings_changes, train_settings
from scalebench.config.checks import ConfigError, legacy_label_problems
from scalebench.config.coercion import coerce
from scalebench.config.matrix import LeftOut, cell_problem, cells, left_out, variants
from scalebench.config.validation import load_schema, validate

__all__ = [
    "BACKENDS",
    "FRAMEWORKS",
    "Cell",
    "ConfigError",
    "LeftOut",
    "cell_problem",
    "cell_training",
    "cells",
    "coerce",
    "left_out",
    "legacy_label_problems",
    "load_schema",
    "settings_changes",
    "train_settings",
    "validate",
    "variants",
]
