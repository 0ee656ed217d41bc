"""Snakemake script: write the synthetic image/mask pairs (images/ + masks/, like an extracted record)."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.data.synthetic import write_dataset

height, width = snakemake.params.size
write_dataset(snakemake.output.raw, snakemake.params.pairs, height, width, snakemake.params.seed)
