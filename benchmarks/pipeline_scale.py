"""Benchmark: Snakemake's own cost at study scale (issue 7, item 5; the finished study: issue 41).

1. `snakemake -n` (DAG build and dry run of every cell, data and analysis job) for a 160-cell
   study (2 frameworks x 2 backends x 8 GPU counts x 5 seeds) and a 1,000-cell one
   (2 x 2 x 10 GPU counts x 25 seeds), in empty work folders: the median of --repeats runs.
2. `snakemake -n` for the 1,000-cell study once it has finished: its data rules run for real,
   every cell holds the records its job would have written (200 epochs, run.json with the
   settings the planner gave it), so the planner's freshness check reads every cell's record.
   The dry run must plan no train job (every cell current).
3. `snakemake --report` for the 160-cell study with 200 epochs per cell: the data rules run for
   real on a small synthetic set, the cells' records come from the generator of
   benchmarks/analysis_scale.py (a few cells failed, diverged, truncated or missing), the
   analysis runs with `--config partial=true` as the README says for studies with missing cells,
   then the report build is timed.

    .venv/bin/python benchmarks/pipeline_scale.py [--repeats 3] [--sizes 160 1000] [--finished 1000]
                                                  [--report-cells 160] [--epochs 200] [--skip-report]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

import analysis_scale  # noqa: E402
from scalebench.cell import RUNS_ROOT, Cell  # noqa: E402
from scalebench.config import load_schema, validate  # noqa: E402
from scalebench.data.split import split_counts  # noqa: E402

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")

# cells -> the study's GPU counts and seeds (2 frameworks x 2 backends each); 16 is the smoke size
STUDIES = {
    16: {"gpus": [1, 2], "seeds": [1, 2]},
    160: {"gpus": [1, 2, 4, 8, 16, 32, 64, 128], "seeds": list(range(1, 6))},
    1000: {"gpus": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], "seeds": list(range(1, 26))},
}
SMOKE = {"repeats": 1, "sizes": [16], "finished": 16, "report_cells": 16, "epochs": 20}


def pairs_for(ranks: int) -> int:
    """The fewest synthetic pairs whose training split gives each of `ranks` ranks one image (the
    config check refuses a batch larger than a rank's shard), at the schema's split fractions."""
    dataset = validate({}, load_schema(_common.REPO / "config" / "schema.yaml"))["dataset"]
    count = ranks
    while split_counts(count, dataset["test_fraction"], dataset["val_fraction"])[0] < ranks:
        count += 1
    return count


def study_config(cells: int, epochs: int) -> dict:
    matrix = STUDIES[cells]
    # Batch 1: one image per rank at the largest cell, so the shard check passes with few pairs.
    pairs = pairs_for(max(matrix["gpus"]))
    return {
        "dataset": {
            "source": "synthetic",
            "image_size": [96, 128],
            "synthetic": {"count": pairs, "size": [96, 128]},
        },
        "matrix": {
            "frameworks": analysis_scale.FRAMEWORKS,
            "backends": analysis_scale.BACKENDS,
            "gpus": matrix["gpus"],
            "seeds": matrix["seeds"],
        },
        "training": {"epochs": epochs, "batch_per_gpu": 1, "eval_every": 10},
    }


def study_cells(config: dict) -> list[dict]:
    """The keys of the study's cells, in analysis_scale's order (its fates are by position)."""
    matrix = config["matrix"]
    return analysis_scale.study_cells(matrix["gpus"], len(matrix["seeds"]))


def snakemake(workdir: Path, *args: str, timeout: float = 900) -> float:
    """Run the workflow in `workdir` with its config; returns the wall time; raises on failure."""
    command = [SNAKEMAKE, "-s", str(_common.REPO / "Snakefile"), "--directory", str(workdir)]
    command += ["--configfile", str(workdir / "study.yaml"), *args]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_common.single_process_env())
    elapsed = time.perf_counter() - started
    (workdir / "snakemake_last.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        raise RuntimeError(
            f"snakemake {' '.join(args)} failed in {workdir}:\n{(result.stdout + result.stderr)[-3000:]}"
        )
    return elapsed


def planned_jobs(workdir: Path, rule: str) -> int:
    """How many jobs of `rule` the last dry run's job table lists (0 where it lists none)."""
    found = re.search(rf"^{rule}\s+(\d+)\b", (workdir / "snakemake_last.log").read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def new_workdir(root: Path, name: str, config: dict) -> Path:
    workdir = root / name
    workdir.mkdir(parents=True)
    (workdir / "study.yaml").write_text(yaml.safe_dump(config))
    return workdir


def dry_runs(workdir: Path, repeats: int, train_jobs: int) -> list[float]:
    """`repeats` timed `snakemake -n` in `workdir`; each must plan `train_jobs` train jobs."""
    times = []
    for _ in range(repeats):
        times.append(snakemake(workdir, "-n"))
        planned = planned_jobs(workdir, "train")
        if planned != train_jobs:
            log = (workdir / "snakemake_last.log").read_text()
            raise RuntimeError(f"the dry run planned {planned} train jobs, not {train_jobs}:\n{log[-3000:]}")
    return times


def finish_study(workdir: Path, epochs: int) -> int:
    """Make the study in `workdir` finished: its data rules run, then every cell gets the records
    its job would have written, run.json with the settings the planner wrote for it."""
    snakemake(workdir, "-c2", "prepared_data")  # the planner writes every cell's settings.json on the way
    rng = np.random.default_rng(0)
    cells = study_cells(yaml.safe_load((workdir / "study.yaml").read_text()))
    for cell in cells:
        folder = workdir / Cell(**cell).folder
        settings = json.loads((folder / "settings.json").read_text())
        analysis_scale.write_cell(folder, cell, rng, "ok", epochs, settings)
    return len(cells)


def write_records(workdir: Path, epochs: int) -> None:
    """The study's records (analysis_scale's generator and fates) under workdir/results/runs."""
    cells = study_cells(yaml.safe_load((workdir / "study.yaml").read_text()))
    analysis_scale.write_study(workdir / RUNS_ROOT, cells, epochs)


def report_build(root: Path, cells: int, epochs: int) -> dict[str, float]:
    workdir = new_workdir(root, f"report_{cells}", study_config(cells, epochs))
    timings = {"data": snakemake(workdir, "-c2", "prepared_data")}
    write_records(workdir, epochs)
    timings["analysis"] = snakemake(workdir, "-c2", "--config", "partial=true")
    timings["report"] = snakemake(workdir, "--report", str(workdir / "report.html"), "--config", "partial=true")
    timings["report_mb"] = (workdir / "report.html").stat().st_size / 2**20
    return timings


def summary(times: list[float]) -> str:
    return f"median {_common.median(times):.1f} s ({', '.join(f'{t:.1f}' for t in times)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="dry runs per study (default 3)")
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(STUDIES), default=[160, 1000])
    parser.add_argument(
        "--finished", type=int, choices=sorted(STUDIES), default=1000, help="the finished study's cells"
    )
    parser.add_argument("--report-cells", type=int, choices=sorted(STUDIES), default=160)
    parser.add_argument("--epochs", type=int, default=200, help="epochs per cell of the finished studies")
    parser.add_argument("--skip-report", action="store_true")
    parser.add_argument("--workdir", help="keep the work folders here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    version = importlib.metadata.version("snakemake")  # what `snakemake --version` prints, without its start
    with _common.workspace(options.workdir, "pipeline_scale_", f"  snakemake {version}") as root:
        for cells in options.sizes:
            workdir = new_workdir(root, f"dry_{cells}", study_config(cells, options.epochs))
            times = dry_runs(workdir, options.repeats, cells)
            print(f"snakemake -n, {cells} cells: {summary(times)}  load {_common.load_average():.2f}", flush=True)
        workdir = new_workdir(root, f"finished_{options.finished}", study_config(options.finished, options.epochs))
        finish_study(workdir, options.epochs)
        times = dry_runs(workdir, options.repeats, 0)
        print(
            f"snakemake -n, {options.finished} finished cells x {options.epochs} epochs (no train job planned): "
            f"{summary(times)}  load {_common.load_average():.2f}",
            flush=True,
        )
        if not options.skip_report:
            timings = report_build(root, options.report_cells, options.epochs)
            print(
                f"{options.report_cells} cells x {options.epochs} epochs: data rules {timings['data']:.1f} s, "
                f"analysis (partial) {timings['analysis']:.1f} s, snakemake --report {timings['report']:.1f} s "
                f"({timings['report_mb']:.1f} MiB)  load {_common.load_average():.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
