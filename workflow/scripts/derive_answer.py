"""Snakemake script: runs.csv, scaling.csv, collectives.csv -> the loss waterfall, the verdicts (with
matrix.seeds {initial, max} the rounds replayed from runs.csv: which decided each, what they cost),
answer.json and the report's first page with the answer in front (report/workflow.rst's text);
hosts.csv, drift.csv, order.csv -> its slow nodes, drift and their rerun command."""

import dataclasses
import json
import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

import pandas as pd
from scalebench.analysis import answer, collectives, rounds, verdicts, waterfall
from scalebench.analysis.drift import read_drift, read_order
from scalebench.analysis.host_findings import host_findings
from scalebench.analysis.hosts import read_hosts
from scalebench.analysis.summary_csv import read_runs
from scalebench.records.tables import SCALING
from scalebench.report.landing import landing_page

given, output, params = snakemake.input, snakemake.output, snakemake.params
runs = read_runs(given.runs)
rules = json.loads(params.rounds)
rules = rounds.Rules(**rules) if rules else None
scaling = pd.read_csv(given.scaling, dtype=SCALING.text()).assign(variant=lambda frame: frame["variant"].fillna(""))
losses = waterfall.waterfall(runs)
losses.to_csv(output.waterfall, index=False)
found = verdicts.verdicts(runs, params.equivalence)
history = []
if rules is not None:  # the rounds again, from the cells they read: the same decisions
    possible = {tuple(key[name] for name in rounds.KEYS) for key in json.loads(params.possible)}
    history = rounds.replay(runs, rules, possible)
    found = rounds.annotate(found, history)
found.to_csv(output.verdicts, index=False)
rounds.round_table(history, runs).to_csv(output.rounds, index=False)
facts = answer.answer(runs, scaling, losses, found, collectives.read(given.collectives), history, rules)
hosts = host_findings(read_hosts(given.hosts), read_drift(given.drift), read_order(given.order))
facts["hosts"] = dataclasses.asdict(hosts)  # sentences, slow_nodes, rerun (analysis/host_findings.py)
Path(output.answer).write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
Path(output.page).write_text(landing_page(Path(snakemake.params.text).read_text(), facts))
for fact in facts["frameworks"]:
    print("derive_answer: " + " ".join(fact["sentences"]))
print(f"derive_answer: {len(losses)} waterfall rows, {len(found)} verdicts; notes: {facts['notes']}")
print("derive_answer: hosts: " + " ".join(hosts.sentences))
