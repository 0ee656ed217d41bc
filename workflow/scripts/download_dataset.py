"""Snakemake script: download the configured Zenodo record's files, md5-verified."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.data.zenodo import download_record

params = snakemake.params
receipt = download_record(
    record=int(params.record),
    pattern=params.files,
    directory=Path(snakemake.output.receipt).parent,
    retries=params.retries,
    timeout_s=params.timeout_s,
)
print(f"download: record {receipt['record']}: {', '.join(f['name'] for f in receipt['files'])} verified")
