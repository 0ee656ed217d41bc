"""Every table's one definition (records/tables.py): the order today's studies were written in, every
writer's file holding exactly its columns (a file that differs is named with them), the rows held to
it, the CSVs read back with its types, docs/tables.md from it."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cell_records import cell, write_cell
from conftest import REPO
from scalebench.analysis import (
    baseline,
    collect,
    collectives,
    cost,
    drift,
    hosts,
    rounds,
    study,
    summary_csv,
    tables,
    verdicts,
    waterfall,
)
from scalebench.analysis.ranks import collect_ranks
from scalebench.analysis.scaling import scaling
from scalebench.cell import cell_path
from scalebench.config import bill as bills
from scalebench.records import tables as definitions
from scalebench.records.fields import SCALAR, Field, Record
from scalebench.records.tables import (
    BASELINE,
    BILL,
    CELL_COLLECTIVES,
    COLLECTIVES,
    COST,
    DRIFT,
    EPOCHS,
    HOSTS,
    INCOMPLETE,
    MODEL_TERMS,
    ORDER,
    PROVENANCE_TABLE,
    RANKS,
    ROUNDS,
    RUNS,
    SCALING,
    SUBMITTED,
    TABLES,
    VERDICTS,
    WATERFALL,
)
from scalebench.rerun import Invocation
from scalebench.timing import scaling_model
from scalebench.train.collectives import empty_row, write_table

# every table's columns as the writers wrote them before the one definition (collect.py, bill.py,
# hosts.py, ...): the integration tests, imported studies and users' scripts read them in this order
WRITTEN = json.loads((REPO / "tests" / "fixtures" / "summary_columns.json").read_text())
INVOCATION = Invocation(("snakemake",), "/work/study", ())
# a table whose writer needs more than one study's tables: its `where` and the test that checks its
# file's header against its definition (Record.header_problem) instead of `written` below
WRITTEN_ELSEWHERE = {
    "results/summary/history.csv": "tests/unit/analysis/test_history_changes.py: a history of studies",
    "results/summary/changes.csv": "tests/unit/analysis/test_history_changes.py: a history of studies",
}
BACKENDS = {"native": 1.0, "horovod": 1.3}  # each backend's epoch over native's


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.where)
def test_the_columns_keep_the_order_studies_were_written_in(table):
    assert table.names == WRITTEN[table.where]


def test_the_order_fixture_holds_every_table_once():
    assert sorted(WRITTEN) == sorted(table.where for table in TABLES)
    assert len({table.where for table in TABLES}) == len(TABLES)


def header(path: Path) -> list[str]:
    with open(path, newline="") as handle:
        return next(csv.reader(handle))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """Every table of a small study (two backends on 1 and 2 GPUs, two seeds, a cell not run), each
    written by its own writer as the rules run them, by its `where`."""
    folder = tmp_path_factory.mktemp("study")
    root, files, cells = folder / "runs", {}, []
    for backend, slower in BACKENDS.items():
        for gpus in (1, 2):
            for seed in (1, 2):
                times = tuple(seconds * slower / gpus * (1 + 0.01 * seed) for seconds in (10.0, 4.0, 4.1, 3.9))
                start = f"2030-01-01T10:{10 * gpus + seed:02d}:00+00:00"
                write_cell(root, backend=backend, gpus=gpus, seed=seed, times=times, run_extra={"start": start})
                cells.append(cell(backend=backend, gpus=gpus, seed=seed))
    cells.append(cell(gpus=4))  # not run: incomplete.csv has a row
    # a cell's collectives.csv, as its rank 0 writes it (train/collectives.py)
    measured = empty_row("all_reduce", 1024, "gradient", 2, "gloo", None)
    measured |= {"iterations": 3, "latency_us": 50.0, "latency_min_us": 49.0, "latency_max_us": 51.0}
    one = root / cell_path("torch", "native", "", 2, 1) / CELL_COLLECTIVES.name
    write_table(
        [measured | {"algbw_gbps": 0.02, "busbw_gbps": 0.02}, empty_row("reduce", 8, "sweep", 2, "gloo", "x")], one
    )
    files[CELL_COLLECTIVES.where] = one
    # the planner's bill and what a run started (config/bill.py)
    bill_rows = [
        {**c, "nodes": 1, "state": bills.TO_RUN, "predicted_s": 60.0, "low_s": 50.0, "high_s": 70.0}
        | {"gpu_hours": c["gpus"] / 60, "time_limit_min": 5, "source": "formula", "method": "m", "note": ""}
        for c in cells
    ]
    files[BILL.where] = bills.write_bill(bill_rows, folder / "bill.csv")
    files[SUBMITTED.where] = bills.write_submitted(bill_rows, folder / "submitted.csv")
    # the analysis, as its rules run it
    summary = study.collect_study(str(root), cells, 0.5, [], INVOCATION)
    runs = summary.runs
    ranks = collect_ranks(root, summary.cells)
    order = drift.order_table(runs, ranks, summary.cells, {"seed": None, "blocks": False}, [1, 2])
    frames = {
        RUNS: runs,
        EPOCHS: summary.epochs,
        PROVENANCE_TABLE: summary.provenance,
        INCOMPLETE: summary.incomplete,
        RANKS: ranks,
        COLLECTIVES: collectives.gather(root, summary.cells),
        SCALING: scaling(runs),
        WATERFALL: waterfall.waterfall(runs),
        VERDICTS: verdicts.verdicts(runs),
        ROUNDS: rounds.round_table([], runs),
        COST: cost.cost(runs, cost.read_submitted(str(files[SUBMITTED.where]))),
        HOSTS: hosts.host_table(ranks, runs, INVOCATION),
        DRIFT: drift.drift_table(order, runs),
        ORDER: order,
        BASELINE: baseline.compare(runs, runs),
    }
    for table, frame in frames.items():
        files[table.where] = folder / f"{len(files)}-{table.name}"
        frame.to_csv(files[table.where], index=False)
    return files


def test_every_table_is_written_with_exactly_its_defined_columns(written):
    """Each writer's file holds its definition's columns in order (provenance.csv: then the settings
    that differ); a table defined here without a writer in this test fails too."""
    assert sorted([*written, *WRITTEN_ELSEWHERE]) == sorted(table.where for table in TABLES)
    problems = [table.header_problem(header(written[table.where])) for table in TABLES if table.where in written]
    assert [problem for problem in problems if problem] == []
    assert len(header(written[PROVENANCE_TABLE.where])) >= len(PROVENANCE_TABLE.names)


def test_a_file_whose_columns_differ_from_its_definition_is_named_with_them():
    names = HOSTS.names
    renamed = ["hostname" if name == "host" else name for name in names]
    assert HOSTS.header_problem(renamed) == (
        "results/summary/hosts.csv: lacks ['host'], not defined ['hostname'] (records/tables.py)"
    )
    assert (
        HOSTS.header_problem(names[:-1])
        == "results/summary/hosts.csv: lacks ['rerun'], not defined [] (records/tables.py)"
    )
    swapped = [names[1], names[0], *names[2:]]
    assert HOSTS.header_problem(swapped) == (
        "results/summary/hosts.csv: columns ['measure', 'host'] out of the defined order (records/tables.py)"
    )
    # an open table's own columns come first; the ones after them are its own business
    assert PROVENANCE_TABLE.header_problem([*PROVENANCE_TABLE.names, "training.epochs"]) == ""
    assert "lacks ['status']" in PROVENANCE_TABLE.header_problem([n for n in PROVENANCE_TABLE.names if n != "status"])


def test_a_writer_that_names_a_column_otherwise_fails_naming_it(written, monkeypatch):
    """A column renamed on the writer's side (or in the definition) fails where the rows become the
    table, not as an empty column beside one the readers do not know."""
    runs = summary_csv.read_runs(written[RUNS.where])
    row = drift.drift_row

    def renamed(*args):
        found = row(*args)
        found["factor"] = found.pop("change")
        return found

    monkeypatch.setattr(drift, "drift_row", renamed)
    order = drift.read_order(written[ORDER.where])
    with pytest.raises(KeyError, match=r"drift.csv rows name \['factor'\], which records/tables.py does not define"):
        drift.drift_table(order, runs)


def test_the_written_csvs_hold_the_defined_columns_in_order_and_read_back_with_their_types(written):
    assert header(written[RUNS.where]) == WRITTEN[RUNS.where]
    assert header(written[EPOCHS.where]) == WRITTEN[EPOCHS.where]
    read = summary_csv.read_runs(written[RUNS.where])
    for name in RUNS.of_type("int"):
        assert str(read[name].dtype) == "Int64", name
    assert str(read["stopped_at_target"].dtype) == "boolean"
    assert set(read["status"]) == {"ok", "missing"} and set(read["variant"]) == {""}
    read_epochs = summary_csv.read_epochs(written[EPOCHS.where])
    assert read_epochs["epoch"].tolist()[:4] == [1, 2, 3, 4] and str(read_epochs["profiled"].dtype) == "boolean"
    # a host or a job named by digits stays text
    assert hosts.read_hosts(written[HOSTS.where])["host"].map(type).eq(str).all()
    assert set(drift.read_order(written[ORDER.where])["slurm_job_id"].dropna()) == {"42"}


def test_the_collector_builds_every_defined_column_and_no_other(tmp_path):
    write_cell(tmp_path, gpus=2)
    keys = {name: cell(gpus=2).get(name, "") for name in definitions.KEYS}
    row, epoch_rows = collect.read_cell(tmp_path / cell_path(**keys), keys)
    assert row["status"] == "ok" and len(epoch_rows) == 4
    assert set(row) == set(RUNS.names) - {"gpu_hours", "train_gpu_hours"}  # the frame computes them for every row
    assert all(set(epoch) == set(EPOCHS.names) for epoch in epoch_rows)
    missing, _ = collect.read_cell(tmp_path / "absent", keys)
    assert missing["status"] == "missing" and set(missing) == set(row)


def test_a_column_the_collector_names_otherwise_fails_naming_both(tmp_path, monkeypatch):
    """A column renamed on one side is an error, not a column of NaN beside an undefined one."""
    write_cell(tmp_path, gpus=2)
    figures = collect.final_figures

    def renamed(*args):
        values = figures(*args)
        values["test_iou"] = values.pop("iou")
        return values

    monkeypatch.setattr(collect, "final_figures", renamed)
    with pytest.raises(KeyError, match=r"lacks \['iou'\], not defined \['test_iou'\]"):
        collect.collect(tmp_path, [cell(gpus=2)])


def test_scaling_csv_has_the_columns_of_every_term_of_the_scaling_model():
    assert tuple(MODEL_TERMS) == scaling_model.TERMS


def test_a_table_refuses_a_column_twice_or_an_unknown_type():
    with pytest.raises(ValueError, match="defines \\['a'\\] twice"):
        Record("t.csv", "t.csv", "", (Field("a", "int", "", "x"), Field("a", "float", "", "y")))
    with pytest.raises(ValueError, match="type 'number'"):
        Field("a", "number", "", "x")


def test_every_column_has_a_meaning_a_scalar_type_and_the_empty_ones_name_a_defined_reason():
    for table in TABLES:
        for column in table.fields:
            where = f"{table.where}: {column.name}"
            assert column.meaning and column.meaning == column.meaning.strip(), where
            assert column.type in SCALAR and column.part is None and not column.old, where
            if re.fullmatch(r"\w+_reason", column.empty):
                assert column.empty in table.names, f"{where}: {column.empty}"


def test_docs_tables_md_is_generated_from_the_definition():
    """docs/tables.md is the current output of tools/tables_reference.py, and names every column."""
    page = subprocess.run(
        [sys.executable, str(REPO / "tools" / "tables_reference.py")], capture_output=True, text=True, check=True
    ).stdout
    assert page == (REPO / "docs" / "tables.md").read_text(), "run: python tools/tables_reference.py --write"
    for table in TABLES:
        assert f"`{table.where}`" in page and all(f"| `{name}` |" in page for name in table.names)
    assert "(docs/tables.md)" in (REPO / "README.md").read_text()


def test_the_recipe_a_copied_run_json_field_reaches_runs_csv_with_no_other_edit(tmp_path, monkeypatch):
    """docs/architecture.md's recipe: a copied Field of runs.csv is all a run.json field needs."""
    extended = Record(RUNS.name, RUNS.where, RUNS.meaning, (*RUNS.fields, Field("python", "str", "", "x", copied=True)))
    monkeypatch.setattr(tables, "RUNS", extended)
    monkeypatch.setattr(collect, "RUNS", extended)
    write_cell(tmp_path, gpus=2)
    runs, _ = collect.collect(tmp_path, [cell(gpus=2)])
    assert list(runs.columns) == [*WRITTEN[RUNS.where], "python"]
    assert runs.iloc[0]["python"] == "3.11.7" and runs.iloc[0]["train_gpu_hours"] > 0
