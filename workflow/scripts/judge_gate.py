"""Snakemake script: this study's runs.csv against the history of studies (history.path) ->
results/summary/gate.json, one verdict per key figure (scalebench/analysis/gate.py)."""

import json
import sys
from pathlib import Path

terminal = sys.stderr  # the verdict's one line goes to the terminal too
sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import gate

judged = gate.judge(
    Path(snakemake.input.runs), Path(snakemake.params.history), snakemake.params.threshold, snakemake.params.alpha
)
Path(snakemake.output.gate).write_text(json.dumps(judged, indent=2, sort_keys=True) + "\n")
print(gate.summary(judged))
print(gate.summary(judged), file=terminal)
