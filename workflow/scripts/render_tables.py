"""Snakemake script: the summary CSVs -> HTML tables for the report."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

import pandas as pd
from scalebench.analysis import collectives
from scalebench.report.html_tables import table_html

PAGES = {
    "waterfall": (
        "The loss waterfall: what each GPU count beyond the base cost, and to which cause",
        "Per series and GPU count: the ideal steady epoch (the base's, scaled), the additive terms (compute "
        "growth, imbalance, exposed communication, data wait, rest; each above the base's same part, scaled) and "
        "the measured epoch, so ideal + terms = measured. Seconds per steady epoch, mean over seeds, with the 95% "
        "interval over seeds (low, high); share: of the measured epoch. reason: why a row is empty.",
        "No series has usable cells at two GPU counts: nothing beyond a base count to explain.",
    ),
    "verdicts": (
        "Verdicts: which backend (or framework) is faster, and how sure",
        "Each pair at one GPU count: a is the faster by its mean; ratio = a's speed over b's (throughput, an "
        "imported log's epoch time or time to target inverted) with its 95% interval; Welch's t on the log of the "
        "seeds' values, p corrected for every comparison of the study (Holm). state: different, equivalent (the "
        "interval within verdicts.equivalence), open (more seeds could decide) or none; bound: the largest "
        "difference the interval leaves. With matrix.seeds {initial, max}: round, the round from which a pair "
        "the answer rests on stayed decided, decided_seeds its seeds then, open_reason why one is still open. "
        "A verdict needs two seeds on each side.",
        "No two backends or frameworks ran with status ok at the same GPU count: nothing to compare.",
    ),
    "rounds": (
        "Rounds: the seeds added where a comparison the answer rests on was open, and what they cost",
        "matrix.seeds {initial, max}: each round read the cells so far (cells), left open comparisons (open) "
        "and decided ones (decided), and added one seed to the cells of each open one (added, added_cells) "
        "until a round added nothing (stopped says why); added_gpu_hours: GPU-hours of the cells it added "
        "(runs.csv gpu_hours; empty where one has no record).",
        "matrix.seeds is a list: every cell ran its seeds, no round added any.",
    ),
    "runs": ("Runs: one row per cell", "Columns are explained in the caption; empty = unknown.", "No cells."),
    "scaling": ("Scaling: speedup and parallel efficiency", "", "No cell with status ok yet."),
    "provenance": ("Provenance of every cell", "", "No cells."),
    "incomplete": (
        "Failed, missing and left-out cells, with the command that reruns each",
        "Run the commands from the workflow directory. Left out: cells of the matrix that do not run "
        "(a backend that the framework does not have, or a GPU count the backend cannot run).",
        "Every cell finished with status ok, none was left out, and every imported file was read.",
    ),
    "collectives": (
        "Each backend's collective at the model's gradient size",
        "The all-reduce (DataParallel: the reduce onto its first GPU) of a message of the model's gradient "
        "bytes, measured on each cell's ranks before training: median over seeds of the latency (the "
        "slowest rank's, median over iterations), algorithm and bus bandwidth in GB/s (nccl-tests' "
        "definitions). CPU ranks (device cpu) reduce over the host, not a GPU interconnect.",
        "No cell of more than one GPU has measured its collectives (training.collectives).",
    ),
}
# tables shown as a summary of their CSV rather than as they are
SUMMARIES = {"collectives": lambda path: collectives.at_gradient(collectives.read(path))}

# runs.csv keeps each cell's training settings as JSON; the provenance page shows those that differ
HIDDEN = {"runs": ["training"]}

for name, (title, note, empty) in PAGES.items():
    path = getattr(snakemake.input, name)
    if name in SUMMARIES:
        frame = SUMMARIES[name](path)
    else:
        frame = pd.read_csv(path, dtype={"reason": str, "rerun": str, "versions": str})
    frame = frame.drop(columns=HIDDEN.get(name, []), errors="ignore")
    Path(getattr(snakemake.output, name)).write_text(table_html(frame, title, note, empty))
    print(f"render_tables: {name}: {len(frame)} rows")
