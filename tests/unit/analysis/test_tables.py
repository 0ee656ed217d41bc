"""The summary tables' one definition (analysis/tables.py): the order today's studies were written
in, the collector's rows held to it, the CSVs read back with its types, docs/tables.md from it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cell_records import cell, write_cell
from conftest import REPO
from scalebench.analysis import collect, summary_csv, tables
from scalebench.analysis.tables import EPOCHS, RUNS, TABLES, Column, Table
from scalebench.cell import cell_path

# the tables' columns as collect.py, cost.py, rounds.py and verdicts.py listed them before the
# definition: the integration tests, imported studies and users' scripts read them in this order
WRITTEN = json.loads((REPO / "tests" / "fixtures" / "summary_columns.json").read_text())


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.name)
def test_the_columns_keep_the_order_studies_were_written_in(table):
    assert table.names == WRITTEN[table.name]


def test_the_written_csvs_hold_the_defined_columns_in_order_and_read_back_with_their_types(tmp_path):
    write_cell(tmp_path, gpus=2)
    runs, epochs = collect.collect(tmp_path, [cell(gpus=2), cell(gpus=4)])  # one finished, one missing
    runs.to_csv(tmp_path / "runs.csv", index=False)
    epochs.to_csv(tmp_path / "epochs.csv", index=False)
    assert (tmp_path / "runs.csv").read_text().splitlines()[0] == ",".join(WRITTEN["runs.csv"])
    assert (tmp_path / "epochs.csv").read_text().splitlines()[0] == ",".join(WRITTEN["epochs.csv"])
    read = summary_csv.read_runs(tmp_path / "runs.csv")
    for name in RUNS.of_type("int"):
        assert str(read[name].dtype) == "Int64", name
    assert str(read["stopped_at_target"].dtype) == "boolean"
    assert read["status"].tolist() == ["ok", "missing"] and read["variant"].tolist() == ["", ""]
    read_epochs = summary_csv.read_epochs(tmp_path / "epochs.csv")
    assert read_epochs["epoch"].tolist() == [1, 2, 3, 4] and str(read_epochs["profiled"].dtype) == "boolean"


def test_the_collector_builds_every_defined_column_and_no_other(tmp_path):
    write_cell(tmp_path, gpus=2)
    keys = {name: cell(gpus=2).get(name, "") for name in collect.KEYS}
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


def test_a_table_refuses_a_column_twice_or_an_unknown_type():
    with pytest.raises(ValueError, match="defines \\['a'\\] twice"):
        Table("t.csv", "t.csv", "", (Column("a", "int", "", "x"), Column("a", "float", "", "y")))
    with pytest.raises(ValueError, match="type 'number'"):
        Column("a", "number", "", "x")


def test_every_column_has_a_meaning_and_the_empty_ones_name_a_defined_reason():
    for table in TABLES:
        for column in table.columns:
            assert column.meaning and column.meaning == column.meaning.strip(), f"{table.name}.{column.name}"
            if column.empty.endswith("_reason"):
                assert column.empty in table.names, f"{table.name}.{column.name}: {column.empty}"


def test_docs_tables_md_is_generated_from_the_definition():
    """docs/tables.md is the current output of tools/tables_reference.py, and names every column."""
    page = subprocess.run(
        [sys.executable, str(REPO / "tools" / "tables_reference.py")], capture_output=True, text=True, check=True
    ).stdout
    assert page == (REPO / "docs" / "tables.md").read_text(), "run: python tools/tables_reference.py --write"
    for table in TABLES:
        assert all(f"| `{name}` |" in page for name in table.names)
    assert "(docs/tables.md)" in (REPO / "README.md").read_text()


def test_the_recipe_a_copied_run_json_field_reaches_runs_csv_with_no_other_edit(tmp_path, monkeypatch):
    """docs/architecture.md's recipe: a Column with copied=True is all a run.json field needs."""
    extended = Table(
        RUNS.name, RUNS.where, RUNS.meaning, (*RUNS.columns, Column("python", "str", "", "x", copied=True))
    )
    monkeypatch.setattr(tables, "RUNS", extended)
    monkeypatch.setattr(collect, "RUNS", extended)
    write_cell(tmp_path, gpus=2)
    runs, _ = collect.collect(tmp_path, [cell(gpus=2)])
    assert list(runs.columns) == [*WRITTEN["runs.csv"], "python"]
    assert runs.iloc[0]["python"] == "3.11.7" and runs.iloc[0]["train_gpu_hours"] > 0
