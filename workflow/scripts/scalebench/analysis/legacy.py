"""Import result logs of the reference studies this project grew from.

A legacy folder holds ``log_<gpus>.csv`` (native backend) and ``log_hvd_<gpus>.csv``
(Horovod): CSV with an unnamed index column and the columns time_per_epoch, loss,
lr, training_time, test_time, iou, one row per epoch; training_time, test_time and
iou are repeated on every row (seconds; IOU in [0, 1]). A study that ran a world
size again wrote each repeat as ``log_<repeat>_<gpus>.csv`` (``log_hvd_<repeat>_<gpus>.csv``),
e.g. ``Logs/log_1_10.csv`` beside ``Logs/log_10.csv``; the plain name is repeat 0.
The repeat number becomes the seed, so repeats of one GPU count are the seeds of
one cell and get intervals as our own cells do, paired by repeat number (the
reference studies ran repeat k of every GPU count with the same code and seed).
Each file becomes one runs.csv row (status ok) and its epochs.csv rows, with
source = the label. A malformed file is skipped and reported by name, never silently.

What a log can give the verdicts (verdicts.py): no images per second, but the epoch time, for the
same work in every cell of one GPU count (the reference studies divide one global batch over the
ranks); and a time to the target where the run reached it: the log evaluates the test IOU once,
after the last epoch, so its time to target is the whole training time where that IOU reached
training.target_iou (the evaluation the log has, as our cells' time to target is at their evaluated
epochs), and empty with the reason where it did not.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scalebench import measures
from scalebench.config import legacy_label_problems

COLUMNS = ["time_per_epoch", "loss", "lr", "training_time", "test_time", "iou"]
NAME = re.compile(r"log_(?P<hvd>hvd_)?(?:(?P<repeat>\d+)_)?(?P<gpus>\d+)\.csv")
NAMES = "log_<gpus>.csv, log_hvd_<gpus>.csv or log_[hvd_]<repeat>_<gpus>.csv"
LEGACY_SPLIT = "imported from an earlier study's log: no step split recorded"


class LegacyError(ValueError):
    """A legacy entry that cannot be read at all (names the config key)."""


@dataclass
class Skipped:
    path: str
    reason: str


def legacy_files(entry: dict, index: int) -> list[Path]:
    """The log_*.csv files of one legacy entry; raises LegacyError naming legacy[index].path."""
    folder = Path(entry["path"])
    if not folder.is_dir():
        raise LegacyError(f"legacy[{index}].path: {folder} is not a folder")
    return sorted(folder.glob("log_*.csv"))


def read_log(path: Path) -> pd.DataFrame:
    """The epochs of one log file; raises ValueError with the reason when it is malformed."""
    try:
        table = pd.read_csv(path, index_col=0)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"not a readable CSV ({str(error).strip().splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    if table.empty:
        raise ValueError("no epoch rows")
    numbers = table[COLUMNS].apply(pd.to_numeric, errors="coerce")
    bad = [c for c in COLUMNS if numbers[c].isna().any() or not np.isfinite(numbers[c]).all()]
    if bad:
        raise ValueError(f"non-numeric or empty values in column(s) {', '.join(bad)}")
    if (numbers[["time_per_epoch", "training_time", "test_time"]] < 0).any().any():
        raise ValueError("negative times")
    if not numbers["iou"].between(0, 1).all():
        raise ValueError("iou outside [0, 1]")
    return numbers.reset_index(drop=True)


def time_to_target(iou: float, training_time: float, target: float | None) -> tuple[float, str | None]:
    """A log's time to the target and why it is empty (the module docstring)."""
    if target is None:
        return math.nan, "no target IOU given"
    if iou < target:
        return math.nan, f"the log's one IOU, after training, is {iou:.3f}, below the target {target}"
    return training_time, None


def import_folder(entry: dict, index: int, target: float | None = None) -> tuple[list[dict], list[dict], list[Skipped]]:
    """runs rows, epoch rows and skipped files of one legacy entry (`target`: training.target_iou)."""
    runs, epochs, skipped = [], [], []
    files = legacy_files(entry, index)
    if not files:
        skipped.append(Skipped(entry["path"], f"no {NAMES} files in the folder"))
    seen: dict[tuple[str, int, int], Path] = {}
    for path in files:
        match = NAME.fullmatch(path.name)
        if not match:
            skipped.append(Skipped(str(path), f"name is not {NAMES}"))
            continue
        backend, gpus, repeat = "horovod" if match["hvd"] else "native", int(match["gpus"]), int(match["repeat"] or 0)
        if (backend, gpus, repeat) in seen:
            earlier = seen[backend, gpus, repeat].name
            skipped.append(Skipped(str(path), f"repeat {repeat} of {backend} on {gpus} GPUs is already {earlier}"))
            continue
        try:
            table = read_log(path)
        except ValueError as error:
            skipped.append(Skipped(str(path), str(error)))
            continue
        seen[backend, gpus, repeat] = path
        keys = {
            "source": entry["label"],
            "framework": entry["framework"],
            "backend": backend,
            "gpus": gpus,
            "seed": repeat,
        }
        runs.append(run_row(keys, path, table, target))
        epochs.extend(epoch_rows(keys, table))
    return runs, epochs, skipped


def run_row(keys: dict, path: Path, table: pd.DataFrame, target: float | None) -> dict:
    """The runs.csv row of one log (`keys`: its cell's), with the reasons for what a log cannot hold."""
    last = table.iloc[-1]
    times = table["time_per_epoch"].tolist()
    to_target, to_target_reason = time_to_target(float(last["iou"]), float(last["training_time"]), target)
    return {
        **keys,
        "status": "ok",
        "reason": f"imported from {path}",
        "epochs": len(table),
        "train_time_s": float(last["training_time"]),
        "steady_epoch_s": measures.steady_median(times),
        "first_epoch_s": times[0],
        "test_time_s": float(last["test_time"]),
        "iou": float(last["iou"]),
        "time_to_target_s": to_target,
        "time_to_target_reason": to_target_reason,
        "images_per_s": math.nan,
        "images_per_s_per_gpu": math.nan,
        "data_wait_s": math.nan,
        "data_wait_share": math.nan,
        "observed_reason": "not recorded by the legacy log",
        "job_s_reason": "not recorded by the legacy log: what its job held is unknown",
        "step_split_reason": LEGACY_SPLIT,
        "comm_total_reason": LEGACY_SPLIT,
    }


def epoch_rows(keys: dict, table: pd.DataFrame) -> list[dict]:
    """The epochs.csv rows of one log (`keys`: its cell's), the training time summed epoch by epoch."""
    cumulative = np.cumsum(table["time_per_epoch"].tolist())
    return [
        {
            **keys,
            "epoch": number + 1,
            "loss": float(row["loss"]),
            "lr": float(row["lr"]),
            "epoch_time_s": float(row["time_per_epoch"]),
            "train_time_s": float(cumulative[number]),
            "step_split_reason": LEGACY_SPLIT,
        }
        for number, row in table.iterrows()
    ]


def import_all(entries: list[dict], target: float | None = None) -> tuple[list[dict], list[dict], list[Skipped]]:
    """Every legacy entry's runs rows, epoch rows and skipped files (labels as the config validation
    checks them; `target`: training.target_iou)."""
    runs, epochs, skipped = [], [], []
    problems = legacy_label_problems(entries)
    if problems:
        raise LegacyError("; ".join(problems))
    for index, entry in enumerate(entries):
        entry_runs, entry_epochs, entry_skipped = import_folder(entry, index, target)
        runs += entry_runs
        epochs += entry_epochs
        skipped += entry_skipped
    return runs, epochs, skipped
