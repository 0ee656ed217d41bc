"""The cells of a local study start in the order drawn from order.seed, and in blocks one seed's
cells all end before the next seed's start (run.json's start and end, order.csv)."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import run_snakemake, tiny_config
from paired_cells import study_data
from scalebench.cell import Cell
from scalebench.config import run_order

pytestmark = pytest.mark.integration


def study(**sections) -> dict:
    """One-rank cells of one epoch that save no checkpoint and no prediction images: what these
    tests read is when Snakemake started each cell."""
    training = {"epochs": 1, "checkpoint_every": 0, "predictions": 0}
    return tiny_config(training=training, **sections)


def order_rows(workdir) -> list[dict]:
    with open(workdir / "results" / "summary" / "order.csv") as handle:
        return list(csv.DictReader(handle))


def run_record(workdir, cell: Cell) -> dict:
    return json.loads((workdir / cell.folder / "run.json").read_text())


def test_one_core_starts_the_cells_in_the_drawn_order(tmp_path_factory, tmp_path):
    order = {"seed": 4, "blocks": False}
    cells = [Cell("torch", "native", 1, seed) for seed in (1, 2, 3)]
    drawn = run_order.run_order(cells, order, [1, 2, 3])
    assert drawn not in (cells, cells[::-1])  # neither the matrix's order nor its reverse
    config = study(matrix={"gpus": [1], "seeds": [1, 2, 3]}, order=order)
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    result = run_snakemake(tmp_path, config, "--cores", "1", "results/summary/order.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    starts = [run_record(tmp_path, cell)["start"] for cell in drawn]
    assert starts == sorted(starts) and len(set(starts)) == 3, starts  # one after another, to the second
    rows = order_rows(tmp_path)
    assert [int(row["seed"]) for row in rows] == [cell.seed for cell in drawn]  # listed as they started
    assert [row["run_order"] for row in rows] == [row["start_order"] for row in rows] == ["1", "2", "3"]


def test_in_blocks_no_cell_of_the_second_seed_starts_before_every_cell_of_the_first_ended(tmp_path_factory, tmp_path):
    # two cores run two one-rank cells at once: without the blocks' dependency the first to end would
    # hand its core to a cell of seed 2 while the other cell of seed 1 still runs
    config = study(matrix={"gpus": [1], "seeds": [1, 2], "batch_per_gpu": [2, 4]}, order={"seed": 1, "blocks": True})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    result = run_snakemake(tmp_path, config, "--cores", "2", "results/summary/order.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = order_rows(tmp_path)
    assert [(row["block"], row["seed"]) for row in rows] == [("1", "1"), ("1", "1"), ("2", "2"), ("2", "2")]
    cells = [Cell("torch", "native", 1, seed, (("batch_per_gpu", batch),)) for seed in (1, 2) for batch in (2, 4)]
    records = {cell: run_record(tmp_path, cell) for cell in cells}
    first_ended = max(run["end"] for cell, run in records.items() if cell.seed == 1)
    second_started = min(run["start"] for cell, run in records.items() if cell.seed == 2)
    assert first_ended <= second_started, records
