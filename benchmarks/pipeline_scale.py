"""Benchmark: Snakemake's own cost at study scale (issue 7, item 5).

1. `snakemake -n` (DAG build and dry run of every cell, data and analysis job) for a 160-cell
   study (2 frameworks x 2 backends x 8 GPU counts x 5 seeds) and a 1,000-cell one
   (2 x 2 x 10 GPU counts x 25 seeds), in empty work folders: the median of --repeats runs.
2. `snakemake --report` for the 160-cell study with 200 epochs per cell: the data rules run for
   real on a small synthetic set, the cells' records come from the generator of
   benchmarks/analysis_scale.py (a few cells failed, diverged, truncated or missing), the
   analysis runs with `--config partial=true` as the README says for studies with missing cells,
   then the report build is timed.

    .venv/bin/python benchmarks/pipeline_scale.py [--repeats 3] [--skip-report]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import analysis_scale  # noqa: E402
from scalebench.cell import Cell  # noqa: E402

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")

STUDIES = {
    160: {"gpus": [1, 2, 4, 8, 16, 32, 64, 128], "seeds": list(range(1, 6))},
    1000: {"gpus": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], "seeds": list(range(1, 26))},
}


def study_config(cells: int, epochs: int = 200) -> dict:
    matrix = STUDIES[cells]
    return {
        # One image per rank at the largest cell: the validation of the shard size passes with few pairs.
        "dataset": {
            "source": "synthetic",
            "image_size": [96, 128],
            "synthetic": {"count": 170, "size": [96, 128]},
        },
        "matrix": {
            "frameworks": ["torch", "tensorflow"],
            "backends": ["native", "horovod"],
            "gpus": matrix["gpus"],
            "seeds": matrix["seeds"],
        },
        "training": {"epochs": epochs, "batch_per_gpu": 1, "eval_every": 10},
    }


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


def new_workdir(root: Path, name: str, config: dict) -> Path:
    workdir = root / name
    workdir.mkdir(parents=True)
    (workdir / "study.yaml").write_text(yaml.safe_dump(config))
    return workdir


def dry_runs(root: Path, cells: int, repeats: int) -> list[float]:
    workdir = new_workdir(root, f"dry_{cells}", study_config(cells))
    times = [snakemake(workdir, "-n") for _ in range(repeats)]
    log = (workdir / "snakemake_last.log").read_text()
    if not re.search(rf"^train\s+{cells}\b", log, re.MULTILINE):
        raise RuntimeError(f"the dry run of {cells} cells did not list {cells} train jobs:\n{log[-2000:]}")
    return times


def write_records(workdir: Path) -> int:
    """The 160 cells' records (analysis_scale's generator and fates) under workdir/results/runs."""
    rng = np.random.default_rng(0)
    config = study_config(160)
    cells = [
        {"framework": f, "backend": b, "gpus": g, "seed": s}
        for f in config["matrix"]["frameworks"]
        for b in config["matrix"]["backends"]
        for g in config["matrix"]["gpus"]
        for s in config["matrix"]["seeds"]
    ]
    fates = {5: "failed", 17: "diverged", 40: "truncated", 41: "missing", 150: "missing"}
    for number, cell in enumerate(cells):
        folder = workdir / Cell(**cell).folder
        analysis_scale.write_cell(folder, cell, rng, fates.get(number, "ok"))
    return len(cells)


def report_build(root: Path) -> dict[str, float]:
    workdir = new_workdir(root, "report_160", study_config(160))
    timings = {"data": snakemake(workdir, "-c2", "prepared_data")}
    write_records(workdir)
    timings["analysis"] = snakemake(workdir, "-c2", "--config", "partial=true")
    timings["report"] = snakemake(workdir, "--report", str(workdir / "report.html"), "--config", "partial=true")
    timings["report_mb"] = (workdir / "report.html").stat().st_size / 2**20
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="dry runs per study size (default 3)")
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(STUDIES), default=sorted(STUDIES))
    parser.add_argument("--skip-report", action="store_true")
    parser.add_argument("--workdir", help="keep the work folders here (default: a temporary folder)")
    options = parser.parse_args()
    version = subprocess.run([SNAKEMAKE, "--version"], capture_output=True, text=True).stdout.strip()
    with _common.workspace(options.workdir, "pipeline_scale_", f"  snakemake {version}") as root:
        for cells in options.sizes:
            times = dry_runs(root, cells, options.repeats)
            print(
                f"snakemake -n, {cells} cells: median {_common.median(times):.1f} s "
                f"({', '.join(f'{t:.1f}' for t in times)})  load {_common.load_average():.2f}",
                flush=True,
            )
        if not options.skip_report:
            timings = report_build(root)
            print(
                f"160 cells x 200 epochs: data rules {timings['data']:.1f} s, analysis (partial) {timings['analysis']:.1f} s, "
                f"snakemake --report {timings['report']:.1f} s ({timings['report_mb']:.1f} MiB)  "
                f"load {_common.load_average():.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
