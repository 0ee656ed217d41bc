"""Snakemake script: one round of matrix.seeds {initial, max}: the records of the cells it reads (rules/
common.smk round_read names them) -> its file, with the comparisons the answer rests on and the cells
it adds (analysis/rounds.py decides)."""

import json
import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import rounds
from scalebench.analysis.collect import collect
from scalebench.files import write_text_atomic
from scalebench.records.tables import KEYS

params, number = snakemake.params, int(snakemake.wildcards.round)
planned = json.loads(params.cells)  # every cell the study can run, with its settings
wanted = {tuple(key[name] for name in KEYS) for key in json.loads(params.read)}
entries = [entry for entry in planned if tuple(entry[name] for name in KEYS) in wanted]
runs, _ = collect(params.runs_root, entries, params.target_iou, params.data_key)
possible = {tuple(entry[name] for name in KEYS) for entry in planned}
found = rounds.decide(runs, rounds.Rules(**json.loads(params.rules)), number, possible)
write_text_atomic(snakemake.output.round, json.dumps(found.to_json(), indent=1, sort_keys=True) + "\n")
print(
    f"seed_round {number}: read {len(found.cells)} cells, adds {len(found.adds)}: "
    + " ".join(rounds.label(**key) for key in found.adds)
    + (f"; {found.stopped}" if found.stopped else "")
)
