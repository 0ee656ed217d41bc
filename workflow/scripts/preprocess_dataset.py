"""Snakemake script: pairs of a raw dataset folder -> arrays and manifest."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821

from scalebench.preprocess import find_pairs, preprocess  # noqa: E402

params = snakemake.params  # noqa: F821
pairs, rule = find_pairs(snakemake.input.raw)  # noqa: F821
print(f"preprocess: {len(pairs)} pairs from {snakemake.input.raw}, paired by {rule}")  # noqa: F821
preprocess(
    pairs,
    Path(snakemake.output.manifest).parent,  # noqa: F821
    tuple(params.image_size),
    params.test_fraction,
    params.split_seed,
    {"source": params.source, "pairing": rule},
)
