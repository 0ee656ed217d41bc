"""Benchmark: the bill's error on a real CPU study (issue 44).

A study of CPU ranks runs through the real workflow in two starts, as the user guide advises
(docs/user-guide.md#the-bill): its first seed, then the whole study, whose other cells the bill
predicts from the first seed's measured runs (the run keeps each cell's prediction as it starts it,
results/plan/submitted.csv). The report's cost table (results/summary/cost.csv) then sets each
prediction against what the cell's job held, launch.py's job_s (its process from before the
framework's imports to the ranks' end), as GPU-hours (ranks x job wall: gpu_hours). The first cell
of each framework on the machine is a cold start, whose start-up the bill does not multiply into
the others (config/prediction.py).

Printed: each cell's source, predicted and measured GPU-hours and error (predicted / measured - 1);
then the median and the worst error of the cells predicted from measured cells, how many ran inside
their 95% interval, the study's total as billed and as taken, and the time limits asked against the
formula's. The cells run two at a time on this machine's two cores, as the demo's do, so a cell's
run depends on what runs beside it: that is part of the error measured. The cells are sized to run
some seconds each (the smoke run's seconds are not figures).

    .venv/bin/python benchmarks/bill_error.py [--workdir DIR] [--backends native horovod] [--gpus 1 2]
                                              [--seeds 3] [--epochs 5] [--size 64 96]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
SMOKE = {"backends": ["native"], "gpus": [1], "seeds": 2, "epochs": 2, "size": [32, 48]}


def study(backends: list[str], gpus: list[int], seeds: int, epochs: int, size: list[int]) -> dict:
    """A small study of torch's `backends` on CPU ranks: 80 synthetic images of `size`, one thread per rank."""
    return {
        "dataset": {"source": "synthetic", "image_size": size, "synthetic": {"count": 80, "size": [96, 128]}},
        "matrix": {"frameworks": ["torch"], "backends": backends, "gpus": gpus, "seeds": list(range(1, seeds + 1))},
        "training": {
            "epochs": epochs,
            "batch_per_gpu": 4,
            "threads_per_rank": 1,
            "eval_every": 0,
            "loader": {"workers": 0},
            "collectives": {"budget_s": 0.5, "max_bytes": 2**20, "iterations": 3},
        },
    }


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    command = [SNAKEMAKE, "-s", str(_common.REPO / "Snakefile"), "--directory", str(workdir)]
    command += ["--configfile", str(workdir / "study.yaml"), "--cores", "2", *args]
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-4000:]}")
    return result


def bill_line(result: subprocess.CompletedProcess) -> str:
    return next(line for line in result.stderr.splitlines() if line.startswith("bill: "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="keep the study here (default: a temporary folder)")
    parser.add_argument("--backends", nargs="+", default=["native", "horovod"])
    parser.add_argument("--gpus", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--size", nargs=2, type=int, default=[64, 96], help="image height and width")
    options = _common.parse_options(parser, SMOKE)
    config = study(options.backends, options.gpus, options.seeds, options.epochs, options.size)
    with _common.workspace(options.workdir, "bill-error-") as root:
        (root / "study.yaml").write_text(yaml.safe_dump(config))
        first = snakemake(root, "--until", "train", "--config", "matrix=" + json.dumps({"seeds": [1]}))
        print(f"start 1 (seed 1): {bill_line(first)}")
        rest = snakemake(root, "results/summary/cost.csv")
        print(f"start 2 (the study): {bill_line(rest)}")
        report(
            pd.read_csv(root / "results" / "summary" / "cost.csv"), pd.read_csv(root / "results" / "plan" / "bill.csv")
        )


def report(cost: pd.DataFrame, bill: pd.DataFrame) -> None:
    """Each cell's prediction against its run, and the figures of docs/benchmarks.md."""
    print("cell                      source       predicted GPU-h  measured GPU-h  error   limit min  job s")
    for _, row in cost.iterrows():
        name = f"{row['backend']} g{row['gpus']} s{row['seed']}"
        print(
            f"{name:25} {row['predicted_from']:12} {row['predicted_gpu_hours']:15.5f} {row['gpu_hours']:15.5f} "
            f"{row['error']:+6.1%}  {row['time_limit_min']:9.0f}  {row['job_s']:.1f}"
        )
    measured = cost[cost["predicted_from"] == "this study"]
    errors = measured["error"].dropna()
    worst = errors.loc[errors.abs().idxmax()] if len(errors) else float("nan")
    inside = measured["within_interval"].dropna()
    interval = (
        f"; {int(inside.astype(bool).sum())} of {len(inside)} with an interval ran inside it" if len(inside) else ""
    )
    print(
        f"median error {statistics.median(errors):+.1%} (median |error| {statistics.median(errors.abs()):.1%}), "
        f"worst {worst:+.1%} over the {len(errors)} cells predicted from measured cells{interval}"
    )
    print(
        f"total of those cells: billed {measured['predicted_gpu_hours'].sum():.4f} GPU-hours, "
        f"took {measured['gpu_hours'].sum():.4f}"
    )
    formula = bill[bill["source"] == "formula"]
    print(
        f"time limits asked: {sorted(measured['time_limit_min'].astype(int))} min (the formula's: "
        f"{sorted(cost.loc[cost['predicted_from'] == 'formula', 'time_limit_min'].astype(int))}); "
        f"{len(formula)} cells of the last bill from the formula"
    )


if __name__ == "__main__":
    main()
