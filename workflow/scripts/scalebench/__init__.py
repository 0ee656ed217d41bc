"""scalebench: how UNet segmentation training scales across GPUs, per framework and backend.

Plain Python, importable without Snakemake. The Snakemake rules call thin
scripts in workflow/scripts/ that parse their arguments and call into here.
"""

__version__ = "0.1.0"
