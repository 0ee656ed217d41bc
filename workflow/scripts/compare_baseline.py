"""Snakemake script: this study's runs.csv against the baseline's -> baseline.csv and its HTML table."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.baseline import compare, read_baseline, study_differences
from scalebench.analysis.summary_csv import read_runs
from scalebench.report.html_tables import table_html

current = read_runs(snakemake.input.runs)
baseline, absent = read_baseline(snakemake.input.baseline)
table = compare(current, baseline, absent)
table.to_csv(snakemake.output.table, index=False)
differences = study_differences(current, baseline, absent) or "none recorded"
note = (
    f"This study against the baseline {snakemake.params.baseline}: ratios this study / baseline with 95% "
    "intervals from both studies' seeds, flagged where the interval excludes 1. "
    f"What differs between the two studies' cells: {differences}."
)
Path(snakemake.output.html).write_text(
    table_html(table, "This study against the baseline", note, "Neither study has cells.")
)
print(f"compare_baseline: {len(table)} rows; differences: {differences}")
