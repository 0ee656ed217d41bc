"""Snakemake script: ranks.csv and runs.csv -> slow hosts (hosts.csv), the run order (order.csv) and
drift (drift.csv), with their HTML tables for the report (analysis/hosts.py, analysis/drift.py)."""

import json
import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.collect import study_entries
from scalebench.analysis.drift import drift_table, order_table
from scalebench.analysis.host_findings import host_findings
from scalebench.analysis.hosts import host_table
from scalebench.analysis.ranks import read_ranks
from scalebench.analysis.summary_csv import read_runs
from scalebench.report.html_tables import table_html
from scalebench.rerun import Invocation

given, params, output = snakemake.input, snakemake.params, snakemake.output
runs, ranks = read_runs(given.runs), read_ranks(given.ranks)
invocation = json.loads(params.invocation)
invocation = Invocation(tuple(invocation["program"]), invocation["directory"], tuple(invocation["options"]))
order = json.loads(params.order)
hosts = host_table(ranks, runs, invocation, params.exclude)
cells_order = order_table(runs, ranks, study_entries(json.loads(params.cells), runs), order, params.seeds)
drift = drift_table(cells_order, runs)
hosts.to_csv(output.hosts, index=False)
cells_order.to_csv(output.order, index=False)
drift.to_csv(output.drift, index=False)

findings = host_findings(hosts, drift, cells_order)
drawn = f"drawn from order.seed {order['seed']}" if order["seed"] is not None else "Snakemake's own (order.seed null)"
pages = {
    "hosts_html": (
        hosts,
        "Hosts: each host's ranks against the other hosts' ranks of the same cells and epochs",
        " ".join(findings.sentences)
        + " ratio: the host's time over the others' (geometric mean over cells), with its interval (low, high); "
        "excess_share: its extra seconds as a share of the others' epoch (docs/report.md).",
        "No cell with status ok has per-rank rows yet.",
    ),
    "drift_html": (
        drift,
        "Drift: the cells against the time they started",
        "change: the fitted change of the cells' residuals (each over the geometric mean of its configuration's seeds) from "
        "the study's first start to its last, with its interval (docs/report.md).",
        "No cells.",
    ),
    "order_html": (
        cells_order,
        "Run order: when each cell started",
        f"The order: {drawn}{', in blocks of one seed' if order['blocks'] else ''}. run_order: the place drawn; "
        "start_order: the place it started in. residual_*: the cell over the geometric mean of its configuration's seeds.",
        "No cells.",
    ),
}
for name, (frame, title, note, empty) in pages.items():
    Path(output[name]).write_text(table_html(frame, title, note, empty))
print(f"analyse_hosts: {hosts['host'].nunique()} hosts, slow: {findings.slow_nodes}; {len(cells_order)} cells")
for sentence in findings.sentences:
    print(sentence)
