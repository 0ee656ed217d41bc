"""Why a cell's job never started: the sbatch error of its failed submission.

A cell whose sbatch was refused (an option the cluster does not support, e.g.
--gpus-per-task on a cluster without GPU scheduling) leaves nothing in its folder.
The SLURM plugin reports sbatch's error as the job's error, and Snakemake writes it
to the log of that run, .snakemake/log/<start time>.snakemake.log:

    Error in rule train:
        message: SLURM sbatch failed. The error message was 'sbatch: error: ...'.
        ...
        output: results/runs/torch/native/g2/s1/metrics.jsonl, results/runs/torch/native/g2/s1/run.json
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_DIR = Path(".snakemake") / "log"
NEVER_STARTED = "its job never started: sbatch refused it: "
SBATCH_ERROR = re.compile(r"SLURM sbatch failed\. The error message was '(?P<error>.*?)'\.\s*\n", re.S)
OUTPUT = re.compile(r"^\s*output: (?P<paths>.+)$", re.M)


def submit_errors(log_dir: str | Path = LOG_DIR) -> dict[str, str]:
    """{an output path of a job whose sbatch failed: the reason}, the newest failure of each path
    (the logs' names begin with their start time, so they sort oldest first)."""
    found: dict[str, str] = {}
    for log in sorted(Path(log_dir).glob("*.snakemake.log")):
        text = log.read_text(errors="replace")
        for block in re.split(r"\n(?=Error in rule )", text)[1:]:
            error, output = SBATCH_ERROR.search(block), OUTPUT.search(block)
            if not (error and output and error.start() < output.start()):
                continue
            message = " ".join(error.group("error").split())
            reason = f"{NEVER_STARTED}{message} ({log_dir}/{log.name})"
            for path in output.group("paths").split(", "):
                found[path.strip()] = reason
    return found
