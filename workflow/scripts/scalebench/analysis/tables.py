"""The summary tables' one definition: runs.csv (one row per cell) and epochs.csv (one per epoch
record), each column's name, type, unit, meaning and when it is empty, in the tables' order.

As records/definitions.py is for the records: the collector (analysis/collect.py) builds its rows
to these names and refuses a row that has another set, the frames take their types from here
(`frame`), the readers of the written CSVs too (analysis/summary_csv.py), and docs/tables.md is
generated from it (tools/tables_reference.py). cost.csv, rounds.csv and verdicts.csv take their
columns and order from here too. `type` is what a column holds: an `int` column of runs.csv or
epochs.csv is written without a decimal point (their frames are typed from here), a `float` one
may hold whole numbers as 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from scalebench import measures

TYPES = ("float", "int", "bool", "str")


@dataclass(frozen=True)
class Column:
    """One column. `text`: read back as written, never as a number ('0' is an id); `copied`: the
    cell's record field of the same name as it is (run.json for runs.csv, the epoch record for
    epochs.csv)."""

    name: str
    type: str
    unit: str
    meaning: str
    empty: str = ""
    text: bool = False
    copied: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"column {self.name}: type {self.type!r} is not one of {TYPES}")


@dataclass(frozen=True)
class Table:
    name: str
    where: str
    meaning: str
    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        names = [column.name for column in self.columns]
        doubled = sorted({name for name in names if names.count(name) > 1})
        if doubled:
            raise ValueError(f"table {self.name} defines {doubled} twice")

    @property
    def names(self) -> list[str]:
        return [column.name for column in self.columns]

    def of_type(self, kind: str) -> list[str]:
        return [column.name for column in self.columns if column.type == kind]

    def text(self) -> dict[str, type]:
        """The dtypes that read the text columns back as written (pandas.read_csv's `dtype`)."""
        return {column.name: str for column in self.columns if column.text}

    def copied(self) -> list[str]:
        return [column.name for column in self.columns if column.copied]

    def row(self, values: dict, derived: tuple[str, ...] = ()) -> dict:
        """`values` as a row of this table: it must hold every column but `derived` (those the frame
        computes), and no other, so that a column renamed on one side fails here, not as NaN."""
        missing = [name for name in self.names if name not in values and name not in derived]
        extra = [name for name in values if name not in self.names]
        if missing or extra:
            raise KeyError(f"{self.name} row: lacks {missing}, not defined {extra} (analysis/tables.py)")
        return values


def names(columns: tuple[Column, ...]) -> list[str]:
    return [column.name for column in columns]


# variant: the label of the optional axes' values ('' for a study without them; see cell.py)
CELL_KEYS = (
    Column("framework", "str", "", "torch or tensorflow", text=True),
    Column("backend", "str", "", "the backend (docs/backends.md)", text=True),
    Column("variant", "str", "", "the label of the cell's values of the optional axes", "a study without them", True),
    Column("gpus", "int", "GPUs", "GPUs (ranks) the cell trained on"),
    Column("seed", "int", "", "the cell's seed"),
)
KEYS = names(CELL_KEYS)
SOURCE = Column(
    "source",
    "str",
    "",
    "where the row is from: scalebench (this study's cells) or an imported study's label",
    text=True,
)
# What each cell trained with along the optional axes (and how it scaled), whether or not the
# study sweeps them: the tables and figures key on the variant, these say what it means.
SETTINGS = (
    Column("model_width", "int", "", "model.width (1 for a record from before it: the only model it could train)"),
    Column("scaling", "str", "", "training.scaling: weak or strong", text=True),
    Column("batch_per_gpu", "int", "images", "training.batch_per_gpu"),
    Column("global_batch", "int", "images", "images per optimizer step, all ranks"),
    Column("precision", "str", "", "training.precision", text=True),
    Column("compression", "str", "", "the gradient compression the cell trained with", text=True),
    Column("steps_per_epoch", "int", "steps", "training.steps_per_epoch", "one pass over the shard"),
)
SETTING_COLUMNS = names(SETTINGS)
# A cell's status in the tables: stale cells finished on other prepared data or settings than the
# study's; unreadable cells hold a run.json this version cannot read (kept, listed with a rerun command).
# held, suspended, preempted, stuck: a job the study ended after it sat in such a SLURM state (cluster/stuck_jobs.py)
STATUSES = [
    "ok",
    "stale",
    "diverged",
    "oom",
    "refused",
    "failed",
    "held",
    "suspended",
    "preempted",
    "stuck",
    "unreadable",
    "missing",
]
# The step split (timing/step_split.py): of the steady median epoch(s) in runs.csv
CRITICAL_PATH = (
    Column("compute_typical_s", "float", "s", "the median compute of the ranks other than the critical one"),
    Column("imbalance_s", "float", "s", "the critical rank's compute above it: stragglers"),
    Column("comm_exposed_critical_s", "float", "s", "the exposed communication the critical rank waited for"),
    Column("data_wait_critical_s", "float", "s", "the critical rank's data wait"),
    Column("rest_critical_s", "float", "s", "the rest of the epoch: the parts add up to the epoch's time"),
    Column("critical_rank", "float", "", "the rank the others waited for (of two median epochs, the first)"),
)
NO_COMM_TOTAL = "the backend gives no per-collective time (the record's comm_total_reason)"
STEADY_SPLIT = (
    Column("compute_median_s", "float", "s", "the median rank's compute (steps less exposed communication)"),
    Column("comm_exposed_median_s", "float", "s", "the median rank's communication nothing computed behind"),
    Column("data_wait_median_s", "float", "s", "the median rank's wait for batches"),
    Column("rest_median_s", "float", "s", "the median rank's epoch less its steps and data waits"),
    Column("comm_total_s", "float", "s", "seconds with communication in flight", NO_COMM_TOTAL),
    Column("comm_overlap", "float", "", "1 - exposed / total communication", NO_COMM_TOTAL),
    Column("step_median_s", "float", "s", "a step's median time"),
    Column("step_p90_s", "float", "s", "a step's 90th percentile time"),
    Column("step_max_s", "float", "s", "the longest step"),
    Column("compute_spread", "float", "", "the ranks' compute spread (the epoch record's compute_spread)"),
)
SPLIT_EMPTY = "step_split_reason"
RUN_SPLIT = (
    *CRITICAL_PATH,
    *STEADY_SPLIT,
    Column("comm_share", "float", "", "comm_exposed_critical_s / steady_epoch_s", SPLIT_EMPTY),
    Column("straggler_rank", "int", "", "the rank with the largest compute in most steady epochs", SPLIT_EMPTY),
    Column("straggler_host", "str", "", "its host", SPLIT_EMPTY, text=True),
    Column("step_split_reason", "str", "", "why the step split is empty", "it is not", text=True),
    Column("comm_total_reason", "str", "", "why comm_total_s and comm_overlap are empty", "they are not", text=True),
    Column("profiled_epoch", "int", "", "the epoch training.profile traced (out of the steady figures)", "none"),
    Column("profile_trace", "str", "", "its trace's folder in the cell", "profile_reason", text=True),
    Column("profile_reason", "str", "", "why there is no trace", "there is one", text=True),
)
# Where and with what a cell ran: the tail of runs.csv and the report's provenance table.
PROVENANCE = (
    Column("nodes", "int", "", "nodes the cell ran on", "no run.json", copied=True),
    Column("hosts", "str", "", "the ranks' hosts, comma-separated"),
    Column("devices", "str", "", "the devices the ranks trained on, comma-separated"),
    Column("versions", "str", "", "python and the libraries' versions"),
    # what the steps did, read from the framework (train/observed.py), beside the settings
    Column("compute_dtype", "str", "", "the dtype of the model's output inside a step", "observed_reason", True),
    Column("compiled_graphs", "int", "", "graphs the framework's compiler built (0: uncompiled)", "observed_reason"),
    Column("recompiles", "int", "", "the compiler's recompiles", "observed_reason"),
    Column("slurm_job_id", "str", "", "the cell's SLURM job", "outside SLURM"),
    Column("git_commit", "str", "", "the checkout the cell ran", copied=True),
    Column("config_hash", "str", "", "the hash of the cell's settings", copied=True),
    Column("data_key", "str", "", "the prepared arrays it trained on", copied=True),
    Column("start", "str", "UTC", "when rank 0 started", copied=True),
    Column("end", "str", "UTC", "when it ended", copied=True),
    Column("training", "str", "", "run.json's resolved training settings, flattened, as JSON"),
    Column("local_gpu_ids", "str", "", "the GPU ids a local cell held", "under SLURM or on CPUs", True),
    Column("rank_cpus", "str", "", "each rank's cores as the OS reported them ('0-3;4-7')", "before binding", True),
    Column("site", "str", "", "run.json's site (driver, GPUs, topology, libraries, ...), flattened, as JSON"),
)
PROVENANCE_COLUMNS = names(PROVENANCE)
# the JSON columns of runs.csv, left out of the report's provenance table
JSON_COLUMNS = ("training", "site")
NOT_RUN = "no epoch record"
RUNS = Table(
    "runs.csv",
    "results/summary/runs.csv",
    "One row per cell of the study (and of an imported study), whatever state its folder is in.",
    (
        SOURCE,
        *CELL_KEYS,
        *SETTINGS,
        Column("status", "str", "", f"one of {', '.join(STATUSES)}", text=True),
        Column("reason", "str", "", "why the status is not ok", "status ok", text=True),
        Column("epochs", "int", "", "epochs recorded", "no run.json"),
        Column("train_time_s", "float", "s", "the epochs' summed time", NOT_RUN),
        Column("steady_epoch_s", "float", "s", "the median steady epoch (after the first, not profiled)", NOT_RUN),
        Column("first_epoch_s", "float", "s", "the first epoch (the warm-up)", NOT_RUN),
        Column("setup_s", "float", "s", "from the rank's start to its first epoch", NOT_RUN),
        Column("test_time_s", "float", "s", "the final evaluation on the test pairs", "no final record"),
        Column("run_s", "float", "s", "rank 0's run: run.json's start to its end (after the imports)", "run_s_reason"),
        Column("run_s_reason", "str", "", "why run_s is empty (a resumed run, a cell that did not end)"),
        Column(
            "job_s",
            "float",
            "s",
            "the cell's job wall, imports to end (SLURM's elapsed, or launch.py's own): what it cost",
            "job_s_reason",
        ),
        Column("job_s_source", "str", "", "slurm elapsed or launch", "job_s_reason"),
        Column("job_s_reason", "str", "", "why job_s is empty (an older record, a resumed cell's unknown attempt)"),
        Column("images_per_s", "float", "images/s", "the median steady epoch's throughput, all ranks", NOT_RUN),
        Column("images_per_s_per_gpu", "float", "images/s", "images_per_s / gpus", NOT_RUN),
        Column("data_wait_s", "float", "s", "waiting for batches over the epochs", "an epoch lacks it"),
        Column("data_wait_share", "float", "", "data_wait_s / train_time_s", NOT_RUN),
        # where a steady epoch's time goes (timing/step_split.py): compute, exposed communication, ...
        *RUN_SPLIT,
        Column(
            "data_placement", "str", "", "device or host: where the samples lived", "before placements", copied=True
        ),
        Column("data_device_bytes", "float", "bytes", "samples each device held (0 with host placement)", copied=True),
        Column("iou", "float", "", "the test pairs' IOU after training", "no final record"),
        Column("test_loss", "float", "", "the test pairs' loss", "no final record"),
        Column("time_to_target_s", "float", "s", "training until validation IOU reached training.target_iou"),
        Column("time_to_target_reason", "str", "", "why time_to_target_s is empty"),
        Column("stopped_at_target", "bool", "", "training stopped there (training.stop_at_target)", "no final record"),
        Column("peak_mem_mb", "float", "MB", "the largest peak of device memory over the epochs", NOT_RUN),
        Column("mfu", "float", "", "model FLOPs utilisation per GPU, median steady epoch", NOT_RUN),
        Column("images", "float", "images", "images trained over the epochs, all ranks", NOT_RUN),
        Column("gpu_hours", "float", "GPU-h", "gpus x job_s, in hours: what the cell held", "job_s_reason"),
        Column("train_gpu_hours", "float", "GPU-h", "gpus x train_time_s, in hours: the epochs' share", NOT_RUN),
        Column("energy_j", "float", "J", "joules over the same epochs, all ranks", "energy_reason"),
        Column("energy_source", "str", "", "nvml (the GPUs only) or rapl (the nodes' CPU packages)", "energy_reason"),
        Column("energy_reason", "str", "", "why energy_j is empty"),
        # what SLURM accounted (launch/accounting.py): empty with the reason outside SLURM or unaccounted
        Column("alloc_gpu_hours", "float", "GPU-h", "the allocation's GPUs x its run time", "alloc_gpu_hours_reason"),
        Column("alloc_gpu_hours_reason", "str", "", "why alloc_gpu_hours is empty"),
        Column("step_energy_j", "float", "J", "the ranks' step by sacct's ConsumedEnergyRaw", "step_energy_reason"),
        Column("step_energy_source", "str", "", "sacct", "step_energy_reason"),
        Column("step_energy_reason", "str", "", "why step_energy_j is empty"),
        Column("parameters", "int", "", "the model's parameters", "no run.json", copied=True),
        Column("observed_reason", "str", "", "why compute_dtype and compiled_graphs are empty"),
        Column(
            "gradient_bytes",
            "int",
            "bytes",
            "the gradients a step reduces (float32)",
            "before model.width",
            copied=True,
        ),
        # the collective benchmark at the gradient size (training.collectives): all-reduce, DataParallel's reduce
        Column("collective_op", "str", "", "the collective benchmarked", "collective_reason"),
        Column("collective_latency_us", "float", "us", "its latency at the gradient size", "collective_reason"),
        Column("collective_algbw_gbps", "float", "GB/s", "its algorithm bandwidth", "collective_reason"),
        Column("collective_busbw_gbps", "float", "GB/s", "its bus bandwidth", "collective_reason"),
        Column("collective_reason", "str", "", "why they are empty"),
        *PROVENANCE,
        # a requeued or retried cell's epochs on more than one allocation (measures.placement)
        Column(
            "node_sets",
            "int",
            "",
            "sets of nodes the cell's epochs ran on: above 1, a requeued or retried job resumed on others, "
            "and every steady figure is one set's epochs (node_sets_note)",
            "the epochs name no hosts (an older record)",
        ),
        Column("node_sets_note", "str", "", "which epochs ran where, and whose give the steady figures", "one set"),
    ),
)
EPOCH_EMPTY = "an earlier record lacks it"
EPOCHS = Table(
    "epochs.csv",
    "results/summary/epochs.csv",
    "One row per epoch record of every cell, with its cell's keys; the per-rank rows stay in metrics.jsonl.",
    (
        SOURCE,
        *CELL_KEYS,
        Column("epoch", "int", "", "the epoch, from 1 (the first is the warm-up)"),
        Column("loss", "float", "", "the training loss", copied=True),
        Column("lr", "float", "", "the rate the optimizer held, read back", "records from before it", copied=True),
        Column("scheduled_lr", "float", "", "the rate lr_schedule.py set", copied=True),
        Column("epoch_time_s", "float", "s", "the epoch's time (the slowest rank)", copied=True),
        Column("images_per_s", "float", "images/s", "the epoch's throughput, all ranks", copied=True),
        Column("data_wait_s", "float", "s", "waiting for batches", EPOCH_EMPTY, copied=True),
        Column("peak_mem_mb", "float", "MB", "the peak of device memory", "not measured", copied=True),
        Column("train_time_s", "float", "s", "training time up to the epoch's end", copied=True),
        Column(
            "val_iou",
            "float",
            "",
            "the validation pairs' IOU",
            "not an evaluated epoch (training.eval_every)",
            copied=True,
        ),
        Column("val_loss", "float", "", "the validation pairs' loss", "not an evaluated epoch", copied=True),
        Column("mfu", "float", "", "model FLOPs utilisation per GPU", "not measured", copied=True),
        Column("energy_j", "float", "J", "joules of the epoch, all ranks", "not measured", copied=True),
        Column("images", "float", "images", "images the epoch saw, all replicas", EPOCH_EMPTY, copied=True),
        *CRITICAL_PATH,
        *STEADY_SPLIT,
        Column("compute_max_s", "float", "s", "the slowest rank's compute", SPLIT_EMPTY),
        Column("comm_exposed_max_s", "float", "s", "the largest exposed communication of a rank", SPLIT_EMPTY),
        Column("rest_max_s", "float", "s", "the largest rest of a rank", SPLIT_EMPTY),
        Column("straggler_rank", "float", "", "the rank with the largest compute", SPLIT_EMPTY),
        Column("straggler_host", "str", "", "its host", SPLIT_EMPTY, text=True),
        Column("step_split_reason", "str", "", "why the step split is empty", "it is not", text=True),
        Column("profiled", "bool", "", "the epoch traced steps (training.profile)", "imported epochs"),
    ),
)
NO_PREDICTION = "no prediction or no measurement (reason)"
COST = Table(
    "cost.csv",
    "results/summary/cost.csv",
    "The bill against what each cell cost (analysis/cost.py): one row per cell of this study that ended, with the "
    "prediction its run started with (results/plan/submitted.csv).",
    (
        *CELL_KEYS,
        Column("status", "str", "", "the cell's status in runs.csv"),
        Column("predicted_from", "str", "", "the bill's source: this study, earlier study, formula", "no prediction"),
        Column("method", "str", "", "how the bill predicted the cell's time (config/prediction.py)", "no prediction"),
        Column("time_limit_min", "float", "min", "the time limit the cell was submitted with", "no prediction"),
        Column("predicted_s", "float", "s", "the predicted run", "no prediction"),
        Column("low_s", "float", "s", "the prediction's 95% interval, low end", "no interval"),
        Column("high_s", "float", "s", "its high end", "no interval"),
        Column(
            "job_s",
            "float",
            "s",
            "the measured job wall (runs.csv's job_s), the figure the bill predicts",
            "not measured (reason says why)",
        ),
        Column("job_s_source", "str", "", "slurm elapsed or launch", "not measured"),
        Column("predicted_gpu_hours", "float", "GPU-h", "gpus x predicted_s, in hours", "no prediction"),
        Column("gpu_hours", "float", "GPU-h", "measured: gpus x job_s (runs.csv's gpu_hours)", "not measured"),
        Column("error", "float", "", "predicted / measured - 1", NO_PREDICTION),
        Column("within_interval", "bool", "", "the run fell inside the prediction's 95% interval", "no interval"),
        Column("alloc_gpu_hours", "float", "GPU-h", "what SLURM accounted for the allocation", "not accounted"),
        Column("reason", "str", "", "why a row has no prediction or no measurement", "it has both"),
    ),
)
ROUNDS = Table(
    "rounds.csv",
    "results/summary/rounds.csv",
    "One row per round of matrix.seeds {initial, max} (analysis/rounds.py).",
    (
        Column("round", "int", "", "the round, from 1"),
        Column("cells", "int", "", "the study's cells the round read"),
        Column("open", "int", "", "the comparisons the answer rests on still open after it"),
        Column("decided", "int", "", "those decided (different or equivalent)"),
        Column("added", "int", "", "the cells it adds (each one more seed of a configuration)"),
        Column("added_cells", "str", "", "their labels, space-separated", "it adds none"),
        Column(
            "added_gpu_hours", "float", "GPU-h", "what the cells it added cost (runs.csv gpu_hours)", "not measured"
        ),
        Column("stopped", "str", "", "why it adds nothing (the last round)", "it adds cells"),
    ),
)
ONE_SIDE = "where it is compared"
VERDICTS = Table(
    "verdicts.csv",
    "results/summary/verdicts.csv",
    "Backends (and frameworks) compared per GPU count (analysis/verdicts.py): Welch's t on log values, Holm's "
    "correction over each study.",
    (
        Column("kind", "str", "", "throughput or time_to_target"),
        Column("compared", "str", "", "backends (of one framework) or frameworks (on one backend)"),
        SOURCE,
        Column("framework", "str", "", "the framework", ONE_SIDE),
        Column("backend", "str", "", "the backend", ONE_SIDE),
        CELL_KEYS[2],
        CELL_KEYS[3],
        Column("a", "str", "", "the faster side by its mean"),
        Column("b", "str", "", "the other side"),
        Column("mean_a", "float", "images/s or s", "a's mean: images/s, or seconds to the target"),
        Column("mean_b", "float", "images/s or s", "b's mean"),
        Column("ratio", "float", "", "a's speed over b's: > 1", "a side without a value"),
        Column("low", "float", "", "the ratio's interval, low end", "too few seeds"),
        Column("high", "float", "", "its high end", "too few seeds"),
        Column("p", "float", "", "Welch's t-test's p-value", "too few seeds"),
        Column("p_holm", "float", "", "p after Holm's correction", "too few seeds"),
        Column("seeds_a", "int", "", "a's seeds"),
        Column("seeds_b", "int", "", "b's seeds"),
        Column("seeds", "int", "", "the smaller side's"),
        Column("verdict", "str", "", "the verdict in words"),
        Column("state", "str", "", "different, equivalent, open or none"),
        Column(
            "bound", "float", "", "the largest difference the interval leaves: max(high, 1 / low) - 1", "no interval"
        ),
        # the rounds of matrix.seeds {initial, max} (rounds.py): where they decided a pair the answer rests on
        Column("round", "int", "", "the round that decided it", "no rounds, or not decided"),
        Column("decided_seeds", "int", "", "the smaller side's seeds when that round decided it", "not decided"),
        Column("open_reason", "str", "", "why a pair the answer rests on is still open after the last round"),
    ),
)
TABLES = (RUNS, EPOCHS, COST, ROUNDS, VERDICTS)


def no_variant_as_empty(variants: pd.Series) -> pd.Series:
    """'' for the rows without a variant (legacy rows, CSVs read back: NaN), so that they group."""
    return variants.astype(object).where(variants.notna(), "").astype(str)


def frame(table: Table, rows: list[dict]) -> pd.DataFrame:
    """`rows` as the table's frame: its columns in order, with their types."""
    result = pd.DataFrame(rows, columns=table.names)
    result["variant"] = no_variant_as_empty(result["variant"])
    if table is RUNS:  # the ranks' definition (measures.py), for own, legacy and read-back rows alike
        gpus = pd.to_numeric(result["gpus"])
        result["gpu_hours"] = measures.gpu_hours(gpus, pd.to_numeric(result["job_s"]))
        result["train_gpu_hours"] = measures.gpu_hours(gpus, pd.to_numeric(result["train_time_s"]))
    for column in table.of_type("int"):
        result[column] = pd.to_numeric(result[column]).astype("Int64")
    for column in table.of_type("bool"):
        result[column] = result[column].astype("boolean")  # empty where not known
    return result


def runs_frame(rows: list[dict]) -> pd.DataFrame:
    return frame(RUNS, rows)


def epochs_frame(rows: list[dict]) -> pd.DataFrame:
    return frame(EPOCHS, rows)
