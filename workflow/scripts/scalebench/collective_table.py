"""A cell's collectives.csv, the one table the ranks write (train/collectives.py) and the analysis
reads (analysis/collectives.py): its name and columns, below both so neither imports the other."""

from __future__ import annotations

# the columns of a cell's collectives.csv (the summary adds the cell's keys in front)
COLUMNS = [
    "op",
    "bytes",
    "size",  # gradient, bucket or sweep: why this size was measured (a bucket the sweep has is 'bucket')
    "dtype",
    "ranks",
    "library",
    "iterations",  # timed iterations (fewer than training.collectives.iterations where the budget was short)
    "latency_us",  # median over iterations of the slowest rank's time
    "latency_min_us",
    "latency_max_us",
    "algbw_gbps",  # bytes / latency, GB/s (10^9 bytes per second)
    "busbw_gbps",  # algbw x the bus factor
    "reason",  # why the figures are empty
]
TABLE = "collectives.csv"
