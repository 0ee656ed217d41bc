"""Snakemake script: the downloaded archives (md5 checked again) -> a safely extracted tree."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.data.extract import safe_extract
from scalebench.data.zenodo import verified_archives

receipt, archives = verified_archives(snakemake.input.receipt)
safe_extract(archives, snakemake.output.raw)
print(f"extract: record {receipt['record']}: {len(archives)} archives -> {snakemake.output.raw}")
