"""results/summary/ranks.csv: every rank of every epoch record, with the cell's keys, start and job."""

from __future__ import annotations

import pandas as pd
from cell_records import cell, rank_rows, without_split, write_cell
from scalebench.analysis.ranks import collect_ranks, read_ranks
from scalebench.records.definitions import RANK
from scalebench.records.tables import RANKS


def test_each_rank_of_each_epoch_is_a_row_with_its_cell_and_cells_without_ranks_have_none(tmp_path):
    times = (10.0, 4.0, 5.0)
    ranks = {n: {"ranks": rank_rows(t, ["n1", "n2"], {"n2": 1.2})} for n, t in enumerate(times, 1)}
    write_cell(
        tmp_path,
        gpus=2,
        variant="batch8",
        times=times,
        epochs_extra={**ranks, 2: {**ranks[2], "profiled": True}},
        run_extra={"start": "2030-01-01T08:00:00+00:00", "slurm": {"job_id": "4711"}},
    )
    without_split(write_cell(tmp_path, gpus=2, seed=2))  # recorded before the step split: no rows
    entries = [cell(gpus=2, variant="batch8"), cell(gpus=2, seed=2)]
    table = collect_ranks(tmp_path, entries)
    assert list(table.columns) == RANKS.names and set(RANK.names) <= set(RANKS.names)  # every field of the rank record
    assert len(table) == 3 * 2 and set(table["seed"]) == {1}
    assert list(table["epoch"]) == [1, 1, 2, 2, 3, 3] and list(table["rank"]) == [0, 1] * 3
    assert list(table["unsteady"]) == [False, False, True, True, False, False]
    first = table.iloc[1]
    assert (first["variant"], first["host"], first["start"], first["slurm_job_id"]) == (
        "batch8",
        "n2",
        "2030-01-01T08:00:00+00:00",
        "4711",
    )
    assert first["compute_s"] == 0.7 * 10.0 * 1.2
    table.to_csv(tmp_path / "ranks.csv", index=False)
    pd.testing.assert_frame_equal(read_ranks(tmp_path / "ranks.csv"), table, check_dtype=False)
