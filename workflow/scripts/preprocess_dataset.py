"""Snakemake script: the raw tree of any source -> arrays and manifest."""

import json
import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.data.pairing import find_pairs
from scalebench.data.preprocess import preprocess

params = snakemake.params
provenance = json.loads(params.provenance)
if "receipt" in snakemake.input.keys():
    receipt = json.loads(Path(snakemake.input.receipt).read_text())
    provenance["doi"] = receipt["doi"]
    provenance["archives"] = [{"name": f["name"], "md5": f["md5"], "size": f["size"]} for f in receipt["files"]]
pairs, rule = find_pairs(snakemake.input.raw)
print(f"preprocess: {len(pairs)} pairs from {snakemake.input.raw}, paired by {rule}")
preprocess(
    pairs,
    Path(snakemake.output.manifest).parent,
    tuple(params.image_size),
    params.test_fraction,
    params.split_seed,
    {**provenance, "pairing": rule},
    root=snakemake.input.raw,
    max_nonbinary_fraction=params.max_nonbinary_fraction,
    val_fraction=params.val_fraction,
)
