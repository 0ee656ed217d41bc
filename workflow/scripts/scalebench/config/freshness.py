"""Whether a finished output still stands for the study, decided by the study rather than by
Snakemake's provenance records, so that a study outlives releases of this project.

Snakemake's provenance triggers compare what a rule looked like when it last ran with what it
looks like now: its params, its shell command, its set of input paths. For the train rule these
carry what a release or a move changes without changing a result (the resolved default of every
key, the paths of the Python and of the checkout), so a new release would retrain, and first
delete, every finished cell. profiles/default therefore keeps Snakemake to its modification-time
rule (`rerun-triggers: mtime`), and the planner (config/planning.py) decides the rest here, from
the record each cell wrote itself, telling Snakemake through one file per cell:

- ``settings.json`` in the cell's folder: the settings the cell's job is started with, and an
  input of the train rule. Its modification time carries the decision:
  - a finished cell whose recorded settings are the study's (a key its record lacks counts as
    being at its schema default: config.settings_changes): dated no later than the cell's
    outputs, so nothing reruns, whatever the release, the checkout's or the environment's path;
  - a finished cell trained with other settings, or whose outputs are incomplete (a job killed
    before its final record, found also where Snakemake's own metadata is gone): newer than its
    outputs, so Snakemake retrains it, and only it;
  - a cell whose record cannot be read (not JSON, or too old to hold its settings): kept as it
    is, dated before its outputs; the report lists it with the reason and its rerun command.

The analysis is cheap and reruns when the project's code or the study's configuration changes:
``write_stamp`` keeps a file whose content is their digest, rewritten only when it changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from scalebench.cluster import cell_holder
from scalebench.config.cell_settings import settings_changes
from scalebench.files import write_text_atomic
from scalebench.records import FINISHED_STATUSES, read_metrics, run_problem

SETTINGS_FILE = "settings.json"
OUTPUTS = ("run.json", "metrics.jsonl")  # the train rule's outputs
# What the analysis depends on besides its input files: a new release changes one of these.
CODE = ("Snakefile", "rules", "workflow/scripts", "report", "config/schema.yaml")


@dataclass(frozen=True)
class Verdict:
    """What the planner found in a cell's folder.

    state: new (no outputs yet: Snakemake trains it anyway), current (finished with the study's
    settings), changed (finished with other settings), incomplete (outputs without an end),
    unreadable (a record this version cannot read: kept, listed by the report).
    """

    state: str
    reason: str = ""
    held_by: str = ""  # incomplete because a live job still trains it (cluster/cell_holder.py)

    @property
    def retrain(self) -> bool:
        return self.state in ("changed", "incomplete")

    def warning(self, cell_path: str, folder: str) -> str | None:
        """What a run says about the cell in `folder` (None where there is nothing to say)."""
        if self.state == "changed":
            return f"{cell_path} was trained with other settings ({self.reason}); a run that builds it retrains it"
        if self.state == "incomplete" and self.held_by:
            return (
                f"{cell_path} is being trained by {self.held_by} (its job still runs); a run that builds it "
                "waits for that job and adopts its outcome instead of training beside it"
            )
        if self.state == "incomplete":
            return f"{cell_path} is incomplete ({self.reason}); a run that builds it retrains it"
        if self.state == "unreadable":
            return (
                f"{cell_path} is kept but cannot be read ({self.reason}); the report lists it; "
                f"rerun it with --forcerun {folder}/run.json"
            )
        return None


def settings_text(settings: dict) -> str:
    """settings.json's content: one canonical text, so the same settings are the same bytes."""
    return json.dumps(settings, indent=1, sort_keys=True) + "\n"


def verdict(folder: str | Path, settings: dict, defaults: dict) -> Verdict:
    """The state of the cell in `folder` against the settings it would run with now (`defaults`:
    the same cell's settings with every key at its schema default)."""
    folder = Path(folder)
    if not all((folder / name).is_file() for name in OUTPUTS):
        return Verdict("new")
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return Verdict("unreadable", "run.json is not valid JSON")
    problem = run_problem(run)
    if problem:
        return Verdict("unreadable", problem)
    if run["status"] not in FINISHED_STATUSES:
        holder = cell_holder.live_holder(folder)
        held_by = holder.describe() if holder else ""
        return Verdict("incomplete", f"run.json says {run['status']}: the job did not finish", held_by)
    records, complete = read_metrics(folder / "metrics.jsonl")
    if not complete or not any(record.get("type") == "final" for record in records):
        return Verdict("incomplete", "metrics.jsonl has no final record: the job did not finish")
    if not isinstance(run.get("settings"), dict):
        return Verdict("current")  # refused by an older launcher before any rank: no settings to compare
    changes = settings_changes(run["settings"], settings, defaults)
    if changes:
        return Verdict("changed", "; ".join(changes))
    return Verdict("current")


def outputs_time(folder: Path) -> float:
    """The modification time Snakemake compares inputs with: the oldest of the outputs."""
    return min((folder / name).stat().st_mtime for name in OUTPUTS)


def write_settings_file(folder: str | Path, settings: dict, found: Verdict) -> Path:
    """Write the cell's settings.json and date it by the verdict (see the module's docstring)."""
    folder = Path(folder)
    path = folder / SETTINGS_FILE
    text = settings_text(settings)
    if not path.is_file() or path.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    if found.state == "new":
        return path
    done = outputs_time(folder)
    written = path.stat().st_mtime
    if found.retrain and written <= done:
        moment = max(time.time(), done + 1)
        os.utime(path, (moment, moment))
    elif not found.retrain and written >= done:
        # these settings made the outputs (or the record cannot tell): older than them, nothing reruns
        os.utime(path, (done - 1, done - 1))
    return path


def code_digest(root: str | Path, parts: tuple[str, ...] = CODE) -> str:
    """A digest of the project's files that the analysis runs (contents only, not paths or times)."""
    root = Path(root)
    digest = hashlib.sha256()
    for part in parts:
        base = root / part
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def write_stamp(path: str | Path, content: dict) -> Path:
    """A file whose content is `content`'s digest, rewritten (and so newer) only when it changes:
    an input that reruns its rule exactly when what the stamp describes changed."""
    path = Path(path)
    text = json.dumps({"digest": hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()}) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    return path
