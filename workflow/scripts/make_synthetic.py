"""Snakemake script: write the synthetic image/mask pairs."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821

from scalebench.synthetic import write_dataset  # noqa: E402

height, width = snakemake.params.size  # noqa: F821
write_dataset(snakemake.output[0], snakemake.params.pairs, height, width, snakemake.params.seed)  # noqa: F821
