"""Planning a study: the one place where a Snakemake start acts on the world before its jobs.

Each start makes two objects, in this order (rules/train.smk, through rules/common.smk, once the train
rule exists and before the analysis rules read the cells):

- `bill_study` reads, and acts on nothing: each cell's freshness verdict (config/freshness.py: finished,
  changed, incomplete, held by a live job) and the bill (config/bill.py: each cell to run predicted,
  and the time limit its job asks for). The train rule's resources read the bill, and the SLURM
  pre-flight below evaluates them, so it comes first.
- `plan_study` returns the plan (config/plan.py), doing everything planning does to the world, in
  the process the user started, in this order:

1. this machine's GPUs, for a local run (config/local_gpus.py): a bad CUDA_VISIBLE_DEVICES or a
   declared count above the machine's is refused; a counted one becomes the local scheduler's limit;
2. each cell's settings.json written and dated by its verdict so that Snakemake retrains exactly the
   changed and incomplete cells, and a warning for each cell that will be retrained, is being trained
   by a live job, or cannot be read; the same for a cell named on the command line outside the
   matrix (the README's g8 cell on SLURM);
3. on SLURM, the pre-flight: the plugin patched (config/slurm_plugin.py, which checks its version),
   a rank larger than any node or an excluded node SLURM does not know refused, and `sbatch
   --test-only` asked once per distinct request of the cells to submit (config/slurm_check.py):
   the refused cells are left out;
4. the left-out cells and their reasons said; the bill written (results/plan/bill.csv) and said in
   one line, with the rounds' worst case where matrix.seeds is {initial, max}, a study over
   budget.max_gpu_hours refused, and in a run that trains each cell's prediction kept as it starts
   (results/plan/submitted.csv);
5. the run order's priorities (config/run_order.py), and Snakemake's rerun triggers other than mtime
   said (they would retrain finished cells);
6. the analysis' stamp (config/freshness.py), and for matrix.seeds {initial, max} the rounds'
   stamp (config/seeds.py: what the rounds decide by; the cells a round could add are planned in
   steps 2 to 5 like the others: settings.json, the pre-flight, the bill, the priorities), a round
   file that cannot be read removed (its round is decided again from the records).

In a job's own process (Snakemake reads the Snakefile again there) both plan nothing: the bill is
empty (each limit the formula's: nothing in a job reads it), the plan holds the config's cells and the
outputs as they are (no verdicts, refusals or priorities: those order and shape the submissions, which
only the process the user started makes), and no file is written, no program run.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from scalebench import rerun
from scalebench.backends import BACKENDS, FRAMEWORKS
from scalebench.cell import RUNS_ROOT, VARIANT_REGEX, Cell
from scalebench.config import bill as bills
from scalebench.config import local_gpus, slurm_check, slurm_plugin
from scalebench.config.bill import Bill
from scalebench.config.freshness import OUTPUTS, Verdict, code_digest, verdict, write_settings_file, write_stamp
from scalebench.config.matrix import cell_problem
from scalebench.config.plan import PlanError, Study, StudyPlan, finished_cells
from scalebench.config.run_order import study_priorities
from scalebench.config.seeds import ROUNDS_STAMP, remove_unreadable_rounds, round_cells

ANALYSIS_STAMP = "results/summary/.analysis-inputs.json"
# Sections of the config that change no table or figure, left out of the analysis' stamp: where the
# finished study is kept (history.path) redraws nothing.
NOT_ANALYSED = ("history",)
# A train job's output named on the command line: results/runs/{framework}/{backend}[/{variant}]/g{gpus}/s{seed}/<output>
CELL_TARGET = re.compile(
    rf"{RUNS_ROOT}/(?P<framework>{'|'.join(FRAMEWORKS)})/(?P<backend>{'|'.join(BACKENDS)})"
    rf"(?:/(?P<variant>{VARIANT_REGEX}))?/g(?P<gpus>\d+)/s(?P<seed>\d+)/(?:{'|'.join(map(re.escape, OUTPUTS))})"
)


@dataclass(frozen=True)
class Start:
    """This Snakemake start as rules/common.smk reads it from `workflow`: plain values, and the two
    things only Snakemake can do (register a resource, evaluate the train rule's resources)."""

    main_process: bool  # False in a job's own Snakemake
    argv: tuple[str, ...]
    basedir: str  # the checkout: the analysis' stamp digests its code
    configfiles: tuple[str, ...]  # as Snakemake resolved them, for the stamp's invocation
    snakefile: str
    declared_gpus: int | None  # `--resources local_gpus=N`
    cores_without_nodes: bool  # where argv is not Snakemake's (the API): cores given and no --jobs
    register_gpus: Callable[[int], None]
    train_resources: Callable[[Cell], tuple[Mapping[str, Any], int]]  # a cell's train job as SLURM gets it
    # the rounds' expected cost from the first seeds' scatter (analysis/round_outlook.py: the analysis'
    # own reading of the records, which config/ may not import)
    round_outlook: bills.Outlook | None = None


def bill_study(study: Study, start: Start) -> Bill:
    """The bill (config/bill.py): each cell's verdict, as its folder holds it, and each cell to run or
    held predicted; read before anything acts, since the train rule's resources read it. Empty in a
    job's own Snakemake (nothing is read there)."""
    if not start.main_process:
        return Bill(study)
    command = rerun.command(list(start.argv))
    matrix_cells = study.matrix.cells()
    rounds = every_round_cell(matrix_cells, study)  # the rounds' worst case: every open comparison to max
    planned = matrix_cells + rounds
    cells = [*planned, *named_cells(study, command.targets if command else (), None, planned)]
    verdicts = {cell: verdict(cell.folder, study.settings(cell), study.default_settings(cell)) for cell in cells}
    forced = slurm_check.forced_cells(tuple(cells), command.forced if command else (False, frozenset()))
    executor = command.executor if command else None
    return bills.make_bill(study, verdicts, executor, frozenset(forced), frozenset(rounds), start.round_outlook)


def every_round_cell(cells: tuple[Cell, ...], study: Study) -> tuple[Cell, ...]:
    """The cells a round could add on any machine: a local run leaves out the cells of more GPUs than
    it has, so its rounds compare at a smaller largest count (round_cells of the cells up to each
    count). The bill is made before the machine is counted, so it prices them all; planning bills
    the ones this start's rounds can add."""
    found: dict[Cell, None] = {}
    for count in sorted({cell.gpus for cell in cells}):
        found.update(dict.fromkeys(round_cells([c for c in cells if c.gpus <= count], study.seed_rule)))
    return tuple(found)


def plan_study(
    study: Study,
    start: Start,
    bill: Bill | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
) -> StudyPlan:
    """The study's plan; in the process the user started, with every side effect of planning, in the
    order the module's docstring gives (`bill`: this start's, bill_study's where not given; `env`: the
    environment, `out`: where warnings go). PlanError where the start cannot go on (the message names
    what to change)."""
    matrix = study.matrix
    if not start.main_process:  # a job's own Snakemake: the config's cells, the outputs as they are
        cells = matrix.cells()
        return StudyPlan(study, None, cells, matrix.left_out(), finished=finished_cells(cells, {}))
    env = os.environ if env is None else env
    out = sys.stderr if out is None else out
    bill = bill_study(study, start) if bill is None else bill
    command = rerun.command(list(start.argv))
    executor = command.executor if command else None
    machine = machine_gpus(start, executor, env)
    cells = matrix.cells(machine)
    rounds = round_cells(cells, study.seed_rule)  # matrix.seeds {initial, max}: the cells a round could add
    named = named_cells(study, command.targets if command else (), machine, cells + rounds)
    verdicts = {cell: plan_cell(study, cell, bill.verdicts.get(cell), out) for cell in (*cells, *rounds, *named)}
    refused: dict[Cell, str] = {}
    all_rounds = rounds
    if executor == "slurm":
        refused = preflight(study, start, command, cells + rounds, verdicts, out)
        cells = tuple(cell for cell in cells if cell not in refused)
        rounds = tuple(cell for cell in rounds if cell not in refused)
    left_out = matrix.left_out(machine, refused)
    for entry in left_out:
        print(entry.describe(), file=out)
    reasons = [*matrix.reasons(machine, refused), *((cell, refused.get(cell)) for cell in all_rounds)]
    say_bill(study, bill, [*reasons, *((cell, None) for cell in named)], command, out)
    warn_about_rerun_triggers(command, out)
    stamp_analysis(study, start)
    stamp_rounds(study, cells, out)
    return StudyPlan(
        study,
        machine,
        cells,
        left_out,
        refused,
        verdicts,
        finished_cells(cells + rounds, verdicts),
        _order(study, cells + rounds),
        rounds,
    )


def machine_gpus(start: Start, executor: str | None, env: Mapping[str, str]) -> int | None:
    """This machine's GPUs for a local run, None for a cluster run (there each cell is its own job).

    `--resources local_gpus=N` wins; a local run without it counts the GPUs here and makes the count
    the scheduler's limit, so the running cells never hold more GPUs than there are (which ones each
    holds, launch.py takes: launch/local_pool.py). A count above the machine's, or a
    CUDA_VISIBLE_DEVICES naming a GPU twice or one the machine lacks, is refused (PlanError). Where
    argv is not Snakemake's own (the API), a run is local when it declares the count, or is given
    cores and no --jobs (which every cluster executor needs).
    """
    declared = start.declared_gpus
    local = executor == "local" if executor is not None else (declared is not None or start.cores_without_nodes)
    if not local:
        return None
    problem = local_gpus.machine_problem(dict(env), declared)
    if problem:
        raise PlanError(problem)
    if declared is not None:
        return int(declared)
    count = local_gpus.visible_gpus(dict(env))
    start.register_gpus(count)
    return count


def plan_cell(study: Study, cell: Cell, found: Verdict | None, out: TextIO) -> Verdict:
    """Write the cell's settings.json, the train rule's settings input, dated so that Snakemake retrains
    it exactly when it finished with other settings or its outputs are incomplete (`found`: its verdict
    as the bill read it, config/freshness.py; read here where the bill has none), and say so with the
    reason."""
    settings = study.settings(cell)
    if found is None:
        found = verdict(cell.folder, settings, study.default_settings(cell))
    write_settings_file(cell.folder, settings, found)
    warning = found.warning(cell.path, cell.folder)
    if warning:
        print(f"warning: {warning}", file=out)
    return found


def named_cells(
    study: Study, targets: tuple[str, ...], machine_gpus: int | None, planned: tuple[Cell, ...]
) -> list[Cell]:
    """The cells whose train outputs the command line names outside the matrix (more GPUs on a
    cluster, another seed), that can run: Snakemake builds their jobs, which read their settings.json.
    A cell that cannot run is left to the train rule's input function, which refuses it by name."""
    found: list[Cell] = []
    for target in targets:
        path = Path(target)
        relative = os.path.relpath(path) if path.is_absolute() else os.path.normpath(path)
        match = CELL_TARGET.fullmatch(relative)
        if not match:
            continue
        try:
            cell = study.cell(**{key: value or "" for key, value in match.groupdict().items()})
        except PlanError:
            continue
        if cell in planned or cell in found:
            continue
        if cell_problem(study.config, cell, machine_gpus) is None:
            found.append(cell)
    return found


def preflight(
    study: Study,
    start: Start,
    command: rerun.Command | None,
    cells: tuple[Cell, ...],
    verdicts: Mapping[Cell, Verdict],
    out: TextIO,
) -> dict[Cell, str]:
    """Before any train job is submitted to SLURM: the plugin patched, a rank that fits no node and an
    excluded node SLURM does not know refused (PlanError), and the cells to submit (not finished, or
    forced) whose request `sbatch --test-only` refuses, with sbatch's words. At submission a refusal
    is not resubmitted and a busy controller is asked again (config/slurm_plugin.py)."""
    config = study.config
    cluster = config["cluster"]
    window_s = cluster["busy_retry_min"] * 60
    try:
        slurm_plugin.install(
            window_s, by_priority=config["order"]["seed"] is not None, stuck_after_min=cluster["stuck_after_min"]
        )
    except slurm_plugin.PluginMismatch as error:
        raise PlanError(str(error)) from None
    problem = slurm_check.node_cpus_problem(
        cluster["cpus_per_rank"], cluster["partition"]
    ) or slurm_check.unknown_nodes_problem(cluster["exclude"])
    if problem:
        raise PlanError(problem)
    forced = slurm_check.forced_cells(cells, command.forced if command else (False, frozenset()))
    finished = finished_cells(cells, verdicts)
    to_submit = [cell for cell in cells if cell not in finished or cell in forced]
    if not to_submit:
        return {}
    findings = slurm_check.check(to_submit, start.train_resources, window_s=window_s)
    for note in findings.notes:
        print(note, file=out)
    return dict(findings.refused)


def say_bill(
    study: Study, bill: Bill, reasons: list[tuple[Cell, str | None]], command: rerun.Command | None, out: TextIO
) -> None:
    """The bill written (results/plan/bill.csv) and said in one line; a study whose cells to run are
    predicted to take more than budget.max_gpu_hours refused (PlanError); in a run that trains, each
    cell's prediction kept as it starts (results/plan/submitted.csv)."""
    rows = bill.rows(reasons)
    bills.write_bill(rows)
    print(bills.line(rows), file=out)
    problem = bills.budget_problem(rows, study.config["budget"]["max_gpu_hours"])
    if problem:
        raise PlanError(problem)
    if command is not None and not command.dry_run:
        bills.write_submitted(rows)


def warn_about_rerun_triggers(command: rerun.Command | None, out: TextIO) -> None:
    """profiles/default keeps Snakemake to modification times; its other triggers retrain finished
    cells after an upgrade (a release's new defaults, a moved checkout or environment). Said once,
    here, where the command line names them (under the API they are not known before the DAG)."""
    extra = sorted(command.rerun_triggers - {"mtime"}) if command else []
    if extra:
        print(
            f"warning: rerun triggers {', '.join(extra)} are on; profiles/default sets `rerun-triggers: mtime` "
            "because with them Snakemake retrains finished cells after an upgrade or a move",
            file=out,
        )


def stamp_analysis(study: Study, start: Start) -> None:
    """The analysis' stamp: the project's code, the study's config (less NOT_ANALYSED) and this
    invocation (the report's rerun commands); rewritten only when one of them changes, so the tables
    and figures are redrawn after an upgrade or a changed setting, and not otherwise."""
    invocation = rerun.from_argv(list(start.argv), os.getcwd(), list(start.configfiles), start.snakefile)
    content = {
        "code": code_digest(start.basedir),
        "config": {section: value for section, value in study.config.items() if section not in NOT_ANALYSED},
        "invocation": dataclasses.asdict(invocation),
    }
    write_stamp(ANALYSIS_STAMP, content)


def stamp_rounds(study: Study, cells: tuple[Cell, ...], out: TextIO) -> None:
    """The rounds' stamp (matrix.seeds {initial, max}): what decides them (the seeds' form, the
    verdicts' settings, the target IOU) and the cells the first round reads; rewritten only when one of
    them changes, so the rounds are decided again then (from the cells' records: a cell a round added
    before trains only if its settings changed), and not otherwise. A round file that cannot be read
    (damaged, truncated, edited by hand) is removed, said, and so decided again from the records."""
    config = study.config
    if not study.seed_rule.adaptive:
        return
    for said in remove_unreadable_rounds():
        print(said, file=out)
    content = {
        "seeds": config["matrix"]["seeds"],
        "verdicts": config["verdicts"],
        "target_iou": config["training"]["target_iou"],
        "cells": [cell.path for cell in cells],
    }
    write_stamp(ROUNDS_STAMP, content)


def _order(study: Study, cells: tuple[Cell, ...]) -> dict[Cell, int]:
    return study_priorities(cells, study.config["order"], study.seed_rule.blocks)
