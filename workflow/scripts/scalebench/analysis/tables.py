"""The summary tables as frames, built to their one definition (records/tables.py): runs.csv and
epochs.csv typed from it (`frame`), and any other table's rows held to its columns (`table_frame`),
so that a column renamed on one side fails where the frame is made, not as an empty column beside
an undefined one.
"""

from __future__ import annotations

import pandas as pd

from scalebench import measures
from scalebench.records.fields import Record
from scalebench.records.tables import EPOCHS, RUNS


def no_variant_as_empty(variants: pd.Series) -> pd.Series:
    """'' for the rows without a variant (legacy rows, CSVs read back: NaN), so that they group."""
    return variants.astype(object).where(variants.notna(), "").astype(str)


def table_frame(table: Record, rows: list[dict]) -> pd.DataFrame:
    """`rows` as the table's frame, its columns in order: a column a row leaves out is empty, a
    name the table does not define raises, naming it."""
    undefined = sorted({name for row in rows for name in row if name not in table.by_name})
    if undefined:
        raise KeyError(f"{table.name} rows name {undefined}, which records/tables.py does not define")
    return pd.DataFrame(rows, columns=table.names)


def frame(table: Record, rows: list[dict]) -> pd.DataFrame:
    """`rows` as the table's frame: its columns in order, with their types."""
    result = pd.DataFrame(rows, columns=table.names)
    result["variant"] = no_variant_as_empty(result["variant"])
    if table is RUNS:  # the ranks' definition (measures.py), for own, legacy and read-back rows alike
        gpus = pd.to_numeric(result["gpus"])
        result["gpu_hours"] = measures.gpu_hours(gpus, pd.to_numeric(result["job_s"]))
        result["train_gpu_hours"] = measures.gpu_hours(gpus, pd.to_numeric(result["train_time_s"]))
    for column in table.of_type("int"):
        result[column] = pd.to_numeric(result[column]).astype("Int64")
    for column in table.of_type("bool"):
        result[column] = result[column].astype("boolean")  # empty where not known
    return result


def runs_frame(rows: list[dict]) -> pd.DataFrame:
    return frame(RUNS, rows)


def epochs_frame(rows: list[dict]) -> pd.DataFrame:
    return frame(EPOCHS, rows)
