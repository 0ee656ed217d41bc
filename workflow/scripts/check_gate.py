"""Snakemake script: the gate target's verdict. results/summary/gate.json (judge_gate.py) -> exit 1
where a key figure regressed beyond history.gate_threshold with confidence, so that `snakemake gate`
fails a site's CI after an upgrade; gate.json stays for the reader either way."""

import json
import sys
from pathlib import Path

terminal = sys.stderr
sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import gate

judged = json.loads(Path(snakemake.input.gate).read_text())
said = gate.summary(judged) + f" ({snakemake.input.gate})"
print(said)
print(said, file=terminal)
sys.exit(0 if judged["passed"] else 1)
