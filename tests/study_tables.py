"""Finished studies' summary tables made without training, for the history's tests: cell folders as
training writes them (tests/cell_records.py) through the real collection, scaling, verdicts,
waterfall and answer, as the rules run them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from cell_records import cell, write_cell
from scalebench.analysis import answer, collectives, study, verdicts, waterfall
from scalebench.analysis.scaling import scaling
from scalebench.analysis.summary_csv import read_runs
from scalebench.records.tables import COLLECTIVES
from scalebench.rerun import Invocation

NCCL = "nvidia/nccl/lib/libnccl.so.2"
BACKENDS = {"native": 1.0, "horovod": 1.2}  # each backend's time over native's


def write_study(
    results: Path,
    month: int,
    speed: float,
    driver: str,
    *,
    year: int = 2025,
    day: int = 1,
    nccl: str = "2.21.5",
    device: str = "H100",
    config_hash: str = "h1",
    factor: Callable[[str, int], float] = lambda backend, gpus: 1.0,
) -> Path:
    """A finished study's results folder: two backends on 1 and 2 GPUs, two seeds, run from `day` of
    `month` of `year` on nodes of `device` with `driver` and `nccl`; each cell's epochs take `speed` times a base
    time, times `factor(backend, gpus)` (a planted change, or a study's noise)."""
    site = {"driver": driver, "libraries": {"nccl": {NCCL: nccl}}}
    cells = []
    for backend, slower in BACKENDS.items():
        for gpus in (1, 2):
            for seed in (1, 2):
                scale = speed * slower * factor(backend, gpus) / gpus * (1 + 0.01 * seed)
                times = tuple(t * scale for t in (10.0, 4.0, 6.0, 5.0))
                when = f"{year}-{month:02d}-{day + seed - 1:02d}T1{gpus}:00:00+00:00"
                ended = f"{year}-{month:02d}-{day + seed - 1:02d}T1{gpus}:30:00+00:00"
                extra = {
                    "site": site,
                    "start": when,
                    "end": ended,
                    "devices": [device] * 2,
                    "config_hash": config_hash,
                }
                write_cell(results / "runs", backend=backend, gpus=gpus, seed=seed, times=times, run_extra=extra)
                cells.append(cell(backend=backend, gpus=gpus, seed=seed))
    summary = results / "summary"
    summary.mkdir(parents=True)
    made = study.collect_study(str(results / "runs"), cells, 0.8, [], Invocation(("snakemake",), "/w", ()))
    for name in ("runs", "epochs", "provenance", "incomplete"):
        getattr(made, name).to_csv(summary / f"{name}.csv", index=False)
    runs = read_runs(summary / "runs.csv")
    scaled = scaling(runs)
    scaled.to_csv(summary / "scaling.csv", index=False)
    found = verdicts.verdicts(runs)
    found.to_csv(summary / "verdicts.csv", index=False)
    losses = waterfall.waterfall(runs)
    losses.to_csv(summary / "waterfall.csv", index=False)
    measured = collectives.typed(pd.DataFrame(columns=COLLECTIVES.names))
    facts = answer.answer(runs, scaled, losses, found, measured)
    (summary / "answer.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return results
