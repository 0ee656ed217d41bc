"""Snakemake script: every cell's records (+ imported studies) -> runs, epochs, provenance, incomplete tables."""

import json
import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.ranks import collect_ranks
from scalebench.analysis.rounds import Rules
from scalebench.analysis.study import collect_study
from scalebench.analysis.submissions import submit_errors
from scalebench.rerun import Invocation

params = snakemake.params
invocation = json.loads(params.invocation)
rules = json.loads(params.rounds)  # matrix.seeds {initial, max}: the cells the rounds added are the study's
summary = collect_study(
    params.runs_root,
    json.loads(params.cells),
    params.target_iou,
    json.loads(params.legacy),
    Invocation(tuple(invocation["program"]), invocation["directory"], tuple(invocation["options"])),
    params.data_key,
    json.loads(params.left_out),
    submit_errors(),  # Snakemake's logs in its working directory, where this script runs
    Rules(**rules) if rules else None,
)
summary.runs.to_csv(snakemake.output.runs, index=False)
summary.epochs.to_csv(snakemake.output.epochs, index=False)
summary.provenance.to_csv(snakemake.output.provenance, index=False)
summary.incomplete.to_csv(snakemake.output.incomplete, index=False)
# every rank of every epoch, with the cell's keys (analysis/ranks.py; records/tables.py defines the columns)
collect_ranks(params.runs_root, summary.cells).to_csv(snakemake.output.ranks, index=False)
counts = summary.runs.groupby("source")["status"].value_counts().to_dict()
print(f"collect_runs: {len(summary.runs)} rows, {len(summary.epochs)} epochs; status {counts}")
