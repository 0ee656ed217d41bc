"""Benchmark: ranks.csv and the host and drift analysis of a full-size study (issue 40).

Writes the records of 2 frameworks x 2 backends x 8 GPU counts (1-128, four ranks a node on 64
nodes, one of them 10% slower) x 5 seeds x EPOCHS epochs, every epoch record with its per-rank rows
(1,020,000 rank-epochs at 200 epochs), then times the analysis as the workflow's scripts run it:
collect_runs' ranks.csv (read every metrics.jsonl, write the CSV), analyse_hosts (read it back,
hosts.csv, order.csv, drift.csv) and the two figures.

    .venv/bin/python benchmarks/hosts_scale.py [--epochs 200] [--gpus 1 2 ...] [--seeds 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import _common  # noqa: E402  (puts workflow/scripts on sys.path)

_common.runs_with(_common.PIPELINE, __name__)

import numpy as np  # noqa: E402
from scalebench.cell import OWN_SOURCE, Cell  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd

GPUS = [1, 2, 4, 8, 16, 32, 64, 128]
NODES = [f"gpu{i:03d}" for i in range(64)]
SLOW = "gpu017"
ORDER = {"seed": 1, "blocks": False}
SMOKE = {"gpus": [1, 8], "seeds": 3, "epochs": 3}  # 2 GPU counts x 3 seeds x 4 frameworks and backends


def write_study(root: Path, epochs: int, gpus: list[int] = GPUS, seeds: int = 5) -> tuple[list[dict], pd.DataFrame]:
    """The cells' folders (metrics.jsonl with per-rank rows, run.json) and their runs.csv rows."""
    import pandas as pd

    rng = np.random.default_rng(0)
    frameworks, backends = ("torch", "tensorflow"), ("native", "horovod")
    cells = [Cell(f, b, g, s) for f in frameworks for b in backends for g in gpus for s in range(1, seeds + 1)]
    first, runs = datetime(2030, 1, 1, tzinfo=UTC), []
    for place, cell in enumerate(cells):
        nodes = max(1, cell.gpus // 4)
        start = int(rng.integers(0, len(NODES) - nodes + 1))
        hosts = [NODES[start + rank // 4] for rank in range(cell.gpus)]
        base = 60.0 / cell.gpus * rng.lognormal(0, 0.1)
        lines = []
        for epoch in range(1, epochs + 1):
            compute = base * rng.lognormal(0, 0.02, cell.gpus) * np.where(np.array(hosts) == SLOW, 1.1, 1.0)
            ranks = [
                {"rank": r, "host": h, "epoch_time_s": compute.max() * 1.1, "compute_s": c,
                 "comm_exposed_s": compute.max() - c + 0.05 * base, "data_wait_s": 0.01 * base, "rest_s": 0.001,
                 "steps": 100, "step_median_s": c / 100, "step_p90_s": c / 90, "step_max_s": c / 80,
                 "comm_total_s": None, "comm_overlap": None}
                for r, (h, c) in enumerate(zip(hosts, compute.tolist()))
            ]  # fmt: skip
            lines.append(
                json.dumps({"type": "epoch", "epoch": epoch, "epoch_time_s": compute.max() * 1.1, "ranks": ranks})
            )
        folder = root / "runs" / cell.path
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        started = (first + timedelta(minutes=20 * place)).isoformat(timespec="seconds")
        (folder / "run.json").write_text(json.dumps({"start": started, "slurm": {"job_id": str(1000 + place)}}))
        runs.append({"source": OWN_SOURCE, **cell.key(), "status": "ok", "start": started, "slurm_job_id": str(1000 + place),
                     "hosts": ",".join(sorted(set(hosts))), "steady_epoch_s": base * 1.1, "compute_median_s": base,
                     "comm_exposed_median_s": 0.05 * base, "data_wait_median_s": 0.01 * base, "step_split_reason": None})  # fmt: skip
    return [{**cell.key(), "settings": {"cell": cell.to_json()}} for cell in cells], pd.DataFrame(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200, help="epochs per cell (default 200)")
    parser.add_argument("--gpus", type=int, nargs="+", default=GPUS, help="GPU counts (default 1 to 128)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per GPU count (default 5)")
    parser.add_argument("--out", help="folder for the study and the outputs (default: a temporary one, removed)")
    args = _common.parse_options(parser, SMOKE)
    # Imported once the options are parsed (pandas, scipy, matplotlib: seconds a --parse-only spares).
    from scalebench.analysis.drift import drift_table, order_table
    from scalebench.analysis.hosts import host_table
    from scalebench.analysis.ranks import collect_ranks, read_ranks
    from scalebench.report.host_figures import drift_figure, hosts_figure
    from scalebench.report.saving import save_figure
    from scalebench.rerun import Invocation

    root = Path(args.out or tempfile.mkdtemp(prefix="hosts_scale_"))
    root.mkdir(parents=True, exist_ok=True)
    print(_common.machine_line(), flush=True)
    try:
        entries, runs = write_study(root, args.epochs, args.gpus, args.seeds)
        timings = {}
        mark = time.perf_counter()
        collect_ranks(root / "runs", entries).to_csv(root / "ranks.csv", index=False)
        timings["ranks.csv"] = time.perf_counter() - mark
        mark = time.perf_counter()
        ranks = read_ranks(root / "ranks.csv")
        hosts = host_table(ranks, runs, Invocation(("snakemake",), str(root), ("--profile", "profiles/slurm")))
        order = order_table(runs, ranks, entries, ORDER, list(range(1, args.seeds + 1)))
        drift = drift_table(order, runs)
        timings["analyse_hosts"] = time.perf_counter() - mark
        mark = time.perf_counter()
        save_figure(hosts_figure(hosts), root / "hosts.png")
        save_figure(drift_figure(order, drift), root / "drift.png")
        timings["2 figures"] = time.perf_counter() - mark
    finally:  # a temporary folder goes, also when the analysis fails
        if not args.out:
            shutil.rmtree(root)
    slow = sorted(set(hosts.loc[hosts["slow_node"], "host"]))
    print(
        f"{len(entries)} cells x {args.epochs} epochs, {len(ranks):,} rank-epochs: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    )
    print(f"slow nodes found: {slow} (made slow: {SLOW}); {hosts.loc[hosts['slow_node'], 'verdict'].tolist()}")


if __name__ == "__main__":
    main()
