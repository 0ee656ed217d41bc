"""Every table the study writes, defined once: each CSV's columns in the order it holds them, with
their name, type, unit, meaning and when each is empty (records/fields.py's machinery, as
records/definitions.py is for the records a cell writes).

The planner's bill.csv and submitted.csv (config/bill.py), a cell's collectives.csv (its ranks:
train/collectives.py), and the analysis' summary tables under results/summary. Each writer builds
its rows to these names and takes its header from here (runs.csv's and epochs.csv's collector
refuses a row that has another set: `Record.row`; the other writers refuse a row that names a
column these do not: `analysis.tables.table_frame`), each reader takes the names and the text
columns from here, and docs/tables.md is generated from it (tools/tables_reference.py). `type` is
what a column holds: an `int` column of runs.csv or epochs.csv is written without a decimal point
(their frames are typed from here), a `float` one may hold whole numbers as 1.0.

A table is added here and named in TABLES; docs/tables.md then has its section, and the tests ask
for its column order (tests/fixtures/summary_columns.json, the order its files keep) and for its
writer (tests/unit/analysis/test_tables.py `written`), then check both its files and a finished
study's against its columns.
"""

from __future__ import annotations

from dataclasses import replace

from scalebench.records.definitions import RANK
from scalebench.records.fields import Field, Record


def names(columns: tuple[Field, ...]) -> list[str]:
    return [column.name for column in columns]


# variant: the label of the optional axes' values ('' for a study without them; see cell.py)
CELL_KEYS = (
    Field("framework", "str", "", "torch or tensorflow", text=True),
    Field("backend", "str", "", "the backend (docs/backends.md)", text=True),
    Field(
        "variant", "str", "", "the label of the cell's values of the optional axes", "a study without them", text=True
    ),
    Field("gpus", "int", "GPUs", "GPUs (ranks) the cell trained on"),
    Field("seed", "int", "", "the cell's seed"),
)
KEYS = names(CELL_KEYS)
SOURCE = Field(
    "source",
    "str",
    "",
    "where the row is from: scalebench (this study's cells) or an imported study's label",
    text=True,
)
# What each cell trained with along the optional axes (and how it scaled), whether or not the
# study sweeps them: the tables and figures key on the variant, these say what it means.
SETTINGS = (
    Field("model_width", "int", "", "model.width (1 for a record from before it: the only model it could train)"),
    Field("scaling", "str", "", "training.scaling: weak or strong", text=True),
    Field("batch_per_gpu", "int", "images", "training.batch_per_gpu"),
    Field("global_batch", "int", "images", "images per optimizer step, all ranks"),
    Field("precision", "str", "", "training.precision", text=True),
    Field("compression", "str", "", "the gradient compression the cell trained with", text=True),
    Field("steps_per_epoch", "int", "steps", "training.steps_per_epoch", "one pass over the shard"),
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
    Field("compute_typical_s", "float", "s", "the median compute of the ranks other than the critical one"),
    Field("imbalance_s", "float", "s", "the critical rank's compute above it: stragglers"),
    Field("comm_exposed_critical_s", "float", "s", "the exposed communication the critical rank waited for"),
    Field("data_wait_critical_s", "float", "s", "the critical rank's data wait"),
    Field("rest_critical_s", "float", "s", "the rest of the epoch: the parts add up to the epoch's time"),
    Field("critical_rank", "float", "", "the rank the others waited for (of two median epochs, the first)"),
)
NO_COMM_TOTAL = "the backend gives no per-collective time (the record's comm_total_reason)"
STEADY_SPLIT = (
    Field("compute_median_s", "float", "s", "the median rank's compute (steps less exposed communication)"),
    Field("comm_exposed_median_s", "float", "s", "the median rank's communication nothing computed behind"),
    Field("data_wait_median_s", "float", "s", "the median rank's wait for batches"),
    Field("rest_median_s", "float", "s", "the median rank's epoch less its steps and data waits"),
    Field("comm_total_s", "float", "s", "seconds with communication in flight", NO_COMM_TOTAL),
    Field("comm_overlap", "float", "", "1 - exposed / total communication", NO_COMM_TOTAL),
    Field("step_median_s", "float", "s", "a step's median time"),
    Field("step_p90_s", "float", "s", "a step's 90th percentile time"),
    Field("step_max_s", "float", "s", "the longest step"),
    Field("compute_spread", "float", "", "the ranks' compute spread (the epoch record's compute_spread)"),
)
SPLIT_EMPTY = "step_split_reason"
RUN_SPLIT = (
    *CRITICAL_PATH,
    *STEADY_SPLIT,
    Field("comm_share", "float", "", "comm_exposed_critical_s / steady_epoch_s", SPLIT_EMPTY),
    Field("straggler_rank", "int", "", "the rank with the largest compute in most steady epochs", SPLIT_EMPTY),
    Field("straggler_host", "str", "", "its host", SPLIT_EMPTY, text=True),
    Field("step_split_reason", "str", "", "why the step split is empty", "it is not", text=True),
    Field("comm_total_reason", "str", "", "why comm_total_s and comm_overlap are empty", "they are not", text=True),
    Field("profiled_epoch", "int", "", "the epoch training.profile traced (out of the steady figures)", "none"),
    Field("profile_trace", "str", "", "its trace's folder in the cell", "profile_reason", text=True),
    Field("profile_reason", "str", "", "why there is no trace", "there is one", text=True),
)
# Where and with what a cell ran: the tail of runs.csv and the report's provenance table.
PROVENANCE = (
    Field("nodes", "int", "", "nodes the cell ran on", "no run.json", copied=True),
    Field("hosts", "str", "", "the ranks' hosts, comma-separated"),
    Field("devices", "str", "", "the devices the ranks trained on, comma-separated"),
    Field("versions", "str", "", "python and the libraries' versions"),
    # what the steps did, read from the framework (train/observed.py), beside the settings
    Field("compute_dtype", "str", "", "the dtype of the model's output inside a step", "observed_reason", text=True),
    Field("compiled_graphs", "int", "", "graphs the framework's compiler built (0: uncompiled)", "observed_reason"),
    Field("recompiles", "int", "", "the compiler's recompiles", "observed_reason"),
    Field("slurm_job_id", "str", "", "the cell's SLURM job", "outside SLURM"),
    Field("git_commit", "str", "", "the checkout the cell ran", copied=True),
    Field("config_hash", "str", "", "the hash of the cell's settings", copied=True),
    Field("data_key", "str", "", "the prepared arrays it trained on", copied=True),
    Field("start", "str", "UTC", "when rank 0 started", copied=True),
    Field("end", "str", "UTC", "when it ended", copied=True),
    Field("training", "str", "", "run.json's resolved training settings, flattened, as JSON"),
    Field("local_gpu_ids", "str", "", "the GPU ids a local cell held", "under SLURM or on CPUs", text=True),
    Field("rank_cpus", "str", "", "each rank's cores as the OS reported them ('0-3;4-7')", "before binding", text=True),
    Field("site", "str", "", "run.json's site (driver, GPUs, topology, libraries, ...), flattened, as JSON"),
)
# the JSON columns of runs.csv, left out of the report's provenance table
JSON_COLUMNS = ("training", "site")
NOT_RUN = "no epoch record"
RUNS = Record(
    "runs.csv",
    "results/summary/runs.csv",
    "One row per cell of the study (and of an imported study), whatever state its folder is in.",
    (
        SOURCE,
        *CELL_KEYS,
        *SETTINGS,
        Field("status", "str", "", f"one of {', '.join(STATUSES)}", text=True),
        Field("reason", "str", "", "why the status is not ok", "status ok", text=True),
        Field("epochs", "int", "", "epochs recorded", "no run.json"),
        Field("train_time_s", "float", "s", "the epochs' summed time", NOT_RUN),
        Field("steady_epoch_s", "float", "s", "the median steady epoch (after the first, not profiled)", NOT_RUN),
        Field("first_epoch_s", "float", "s", "the first epoch (the warm-up)", NOT_RUN),
        Field("setup_s", "float", "s", "from the rank's start to its first epoch", NOT_RUN),
        Field("test_time_s", "float", "s", "the final evaluation on the test pairs", "no final record"),
        Field("run_s", "float", "s", "rank 0's run: run.json's start to its end (after the imports)", "run_s_reason"),
        Field("run_s_reason", "str", "", "why run_s is empty (a resumed run, a cell that did not end)"),
        Field(
            "job_s",
            "float",
            "s",
            "the cell's job wall, imports to end (SLURM's elapsed, or launch.py's own): what it cost",
            "job_s_reason",
        ),
        Field("job_s_source", "str", "", "slurm elapsed or launch", "job_s_reason"),
        Field("job_s_reason", "str", "", "why job_s is empty (an older record, a resumed cell's unknown attempt)"),
        Field("images_per_s", "float", "images/s", "the median steady epoch's throughput, all ranks", NOT_RUN),
        Field("images_per_s_per_gpu", "float", "images/s", "images_per_s / gpus", NOT_RUN),
        Field("data_wait_s", "float", "s", "waiting for batches over the epochs", "an epoch lacks it"),
        Field("data_wait_share", "float", "", "data_wait_s / train_time_s", NOT_RUN),
        # where a steady epoch's time goes (timing/step_split.py): compute, exposed communication, ...
        *RUN_SPLIT,
        Field("data_placement", "str", "", "device or host: where the samples lived", "before placements", copied=True),
        Field("data_device_bytes", "float", "bytes", "samples each device held (0 with host placement)", copied=True),
        Field("iou", "float", "", "the test pairs' IOU after training", "no final record"),
        Field("test_loss", "float", "", "the test pairs' loss", "no final record"),
        Field("time_to_target_s", "float", "s", "training until validation IOU reached training.target_iou"),
        Field("time_to_target_reason", "str", "", "why time_to_target_s is empty"),
        Field("stopped_at_target", "bool", "", "training stopped there (training.stop_at_target)", "no final record"),
        Field("peak_mem_mb", "float", "MB", "the largest peak of device memory over the epochs", NOT_RUN),
        Field("mfu", "float", "", "model FLOPs utilisation per GPU, median steady epoch", NOT_RUN),
        Field("images", "float", "images", "images trained over the epochs, all ranks", NOT_RUN),
        Field("gpu_hours", "float", "GPU-h", "gpus x job_s, in hours: what the cell held", "job_s_reason"),
        Field("train_gpu_hours", "float", "GPU-h", "gpus x train_time_s, in hours: the epochs' share", NOT_RUN),
        Field("energy_j", "float", "J", "joules over the same epochs, all ranks", "energy_reason"),
        Field("energy_source", "str", "", "nvml (the GPUs only) or rapl (the nodes' CPU packages)", "energy_reason"),
        Field("energy_reason", "str", "", "why energy_j is empty"),
        # what SLURM accounted (launch/accounting.py): empty with the reason outside SLURM or unaccounted
        Field("alloc_gpu_hours", "float", "GPU-h", "the allocation's GPUs x its run time", "alloc_gpu_hours_reason"),
        Field("alloc_gpu_hours_reason", "str", "", "why alloc_gpu_hours is empty"),
        Field("step_energy_j", "float", "J", "the ranks' step by sacct's ConsumedEnergyRaw", "step_energy_reason"),
        Field("step_energy_source", "str", "", "sacct", "step_energy_reason"),
        Field("step_energy_reason", "str", "", "why step_energy_j is empty"),
        Field("parameters", "int", "", "the model's parameters", "no run.json", copied=True),
        Field("observed_reason", "str", "", "why compute_dtype and compiled_graphs are empty"),
        Field(
            "gradient_bytes",
            "int",
            "bytes",
            "the gradients a step reduces (float32)",
            "before model.width",
            copied=True,
        ),
        # the collective benchmark at the gradient size (training.collectives): all-reduce, DataParallel's reduce
        Field("collective_op", "str", "", "the collective benchmarked", "collective_reason"),
        Field("collective_latency_us", "float", "us", "its latency at the gradient size", "collective_reason"),
        Field("collective_algbw_gbps", "float", "GB/s", "its algorithm bandwidth", "collective_reason"),
        Field("collective_busbw_gbps", "float", "GB/s", "its bus bandwidth", "collective_reason"),
        Field("collective_reason", "str", "", "why they are empty"),
        *PROVENANCE,
        # a requeued or retried cell's epochs on more than one allocation (measures.placement)
        Field(
            "node_sets",
            "int",
            "",
            "sets of nodes the cell's epochs ran on: above 1, a requeued or retried job resumed on others, "
            "and every steady figure is one set's epochs (node_sets_note)",
            "the epochs name no hosts (an older record)",
        ),
        Field("node_sets_note", "str", "", "which epochs ran where, and whose give the steady figures", "one set"),
    ),
)
EPOCH_EMPTY = "an earlier record lacks it"
EPOCHS = Record(
    "epochs.csv",
    "results/summary/epochs.csv",
    "One row per epoch record of every cell, with its cell's keys; the per-rank rows stay in metrics.jsonl.",
    (
        SOURCE,
        *CELL_KEYS,
        Field("epoch", "int", "", "the epoch, from 1 (the first is the warm-up)"),
        Field("loss", "float", "", "the training loss", copied=True),
        Field("lr", "float", "", "the rate the optimizer held, read back", "records from before it", copied=True),
        Field("scheduled_lr", "float", "", "the rate lr_schedule.py set", copied=True),
        Field("epoch_time_s", "float", "s", "the epoch's time (the slowest rank)", copied=True),
        Field("images_per_s", "float", "images/s", "the epoch's throughput, all ranks", copied=True),
        Field("data_wait_s", "float", "s", "waiting for batches", EPOCH_EMPTY, copied=True),
        Field("peak_mem_mb", "float", "MB", "the peak of device memory", "not measured", copied=True),
        Field("train_time_s", "float", "s", "training time up to the epoch's end", copied=True),
        Field(
            "val_iou",
            "float",
            "",
            "the validation pairs' IOU",
            "not an evaluated epoch (training.eval_every)",
            copied=True,
        ),
        Field("val_loss", "float", "", "the validation pairs' loss", "not an evaluated epoch", copied=True),
        Field("mfu", "float", "", "model FLOPs utilisation per GPU", "not measured", copied=True),
        Field("energy_j", "float", "J", "joules of the epoch, all ranks", "not measured", copied=True),
        Field("images", "float", "images", "images the epoch saw, all replicas", EPOCH_EMPTY, copied=True),
        *CRITICAL_PATH,
        *STEADY_SPLIT,
        Field("compute_max_s", "float", "s", "the slowest rank's compute", SPLIT_EMPTY),
        Field("comm_exposed_max_s", "float", "s", "the largest exposed communication of a rank", SPLIT_EMPTY),
        Field("rest_max_s", "float", "s", "the largest rest of a rank", SPLIT_EMPTY),
        Field("straggler_rank", "float", "", "the rank with the largest compute", SPLIT_EMPTY),
        Field("straggler_host", "str", "", "its host", SPLIT_EMPTY, text=True),
        Field("step_split_reason", "str", "", "why the step split is empty", "it is not", text=True),
        Field("profiled", "bool", "", "the epoch traced steps (training.profile)", "imported epochs"),
    ),
)
NO_PREDICTION = "no prediction or no measurement (reason)"
COST = Record(
    "cost.csv",
    "results/summary/cost.csv",
    "The bill against what each cell cost (analysis/cost.py): one row per cell of this study that ended, with the "
    "prediction its run started with (results/plan/submitted.csv).",
    (
        *CELL_KEYS,
        Field("status", "str", "", "the cell's status in runs.csv"),
        Field(
            "predicted_from",
            "str",
            "",
            "the bill's source (submitted.csv's `source`): this study, earlier study, formula",
            "no prediction",
        ),
        Field(
            "method",
            "str",
            "",
            "how the bill predicted the cell's time (config/prediction.py)",
            "no prediction",
            copied=True,
        ),
        Field(
            "time_limit_min", "float", "min", "the time limit the cell was submitted with", "no prediction", copied=True
        ),
        Field("predicted_s", "float", "s", "the predicted run", "no prediction", copied=True),
        Field("low_s", "float", "s", "the prediction's 95% interval, low end", "no interval", copied=True),
        Field("high_s", "float", "s", "its high end", "no interval", copied=True),
        Field(
            "job_s",
            "float",
            "s",
            "the measured job wall (runs.csv's job_s), the figure the bill predicts",
            "not measured (reason says why)",
        ),
        Field("job_s_source", "str", "", "slurm elapsed or launch", "not measured"),
        Field("predicted_gpu_hours", "float", "GPU-h", "gpus x predicted_s, in hours", "no prediction"),
        Field("gpu_hours", "float", "GPU-h", "measured: gpus x job_s (runs.csv's gpu_hours)", "not measured"),
        Field("error", "float", "", "predicted / measured - 1", NO_PREDICTION),
        Field("within_interval", "bool", "", "the run fell inside the prediction's 95% interval", "no interval"),
        Field("alloc_gpu_hours", "float", "GPU-h", "what SLURM accounted for the allocation", "not accounted"),
        Field("reason", "str", "", "why a row has no prediction or no measurement", "it has both"),
    ),
)
ROUNDS = Record(
    "rounds.csv",
    "results/summary/rounds.csv",
    "One row per round of matrix.seeds {initial, max} (analysis/rounds.py).",
    (
        Field("round", "int", "", "the round, from 1"),
        Field("cells", "int", "", "the study's cells the round read"),
        Field("open", "int", "", "the comparisons the answer rests on still open after it"),
        Field("decided", "int", "", "those decided (different or equivalent)"),
        Field("added", "int", "", "the cells it adds (each one more seed of a configuration)"),
        Field("added_cells", "str", "", "their labels, space-separated", "it adds none"),
        Field("added_gpu_hours", "float", "GPU-h", "what the cells it added cost (runs.csv gpu_hours)", "not measured"),
        Field("stopped", "str", "", "why it adds nothing (the last round)", "it adds cells"),
    ),
)
ONE_SIDE = "where it is compared"
VERDICTS = Record(
    "verdicts.csv",
    "results/summary/verdicts.csv",
    "Backends (and frameworks) compared per GPU count (analysis/verdicts.py): Welch's t on log values, Holm's "
    "correction over each study.",
    (
        Field("kind", "str", "", "throughput or time_to_target", text=True),
        Field("compared", "str", "", "backends (of one framework) or frameworks (on one backend)", text=True),
        SOURCE,
        Field("framework", "str", "", "the framework", ONE_SIDE, text=True),
        Field("backend", "str", "", "the backend", ONE_SIDE, text=True),
        CELL_KEYS[2],
        CELL_KEYS[3],
        Field("a", "str", "", "the faster side by its mean", text=True),
        Field("b", "str", "", "the other side", text=True),
        Field("mean_a", "float", "images/s or s", "a's mean: images/s, or seconds to the target"),
        Field("mean_b", "float", "images/s or s", "b's mean"),
        Field("ratio", "float", "", "a's speed over b's: > 1", "a side without a value"),
        Field("low", "float", "", "the ratio's interval, low end", "too few seeds"),
        Field("high", "float", "", "its high end", "too few seeds"),
        Field("p", "float", "", "Welch's t-test's p-value", "too few seeds"),
        Field("p_holm", "float", "", "p after Holm's correction", "too few seeds"),
        Field("seeds_a", "int", "", "a's seeds"),
        Field("seeds_b", "int", "", "b's seeds"),
        Field("seeds", "int", "", "the smaller side's"),
        Field("verdict", "str", "", "the verdict in words", text=True),
        Field("state", "str", "", "different, equivalent, open or none", text=True),
        Field(
            "bound", "float", "", "the largest difference the interval leaves: max(high, 1 / low) - 1", "no interval"
        ),
        # the rounds of matrix.seeds {initial, max} (rounds.py): where they decided a pair the answer rests on
        Field("round", "int", "", "the round that decided it", "no rounds, or not decided"),
        Field("decided_seeds", "int", "", "the smaller side's seeds when that round decided it", "not decided"),
        Field("open_reason", "str", "", "why a pair the answer rests on is still open after the last round", text=True),
    ),
)


# The planner's bill (config/bill.py): a row per cell of the matrix, as a start found it
NOT_PREDICTED = "a cell finished or left out"
NO_INTERVAL = "not known (one measurement, the formula), or no prediction"
BILL_COLUMNS = (
    *CELL_KEYS,
    Field("nodes", "int", "", "the nodes the cell runs on (one locally)"),
    Field(
        "state",
        "str",
        "",
        "finished, to run, held by a live job, left out, or a round's, if open (a cell only a round of "
        "matrix.seeds {initial, max} adds, where a comparison stays open)",
    ),
    Field(
        "predicted_s",
        "float",
        "s",
        "the cell's job wall, predicted: start-up plus its epochs (config/prediction.py)",
        NOT_PREDICTED,
    ),
    Field("low_s", "float", "s", "its 95% interval, low end", NO_INTERVAL),
    Field("high_s", "float", "s", "its high end", NO_INTERVAL),
    Field(
        "gpu_hours",
        "float",
        "GPU-h",
        "gpus x predicted_s, in hours: what the cell's allocation will hold",
        NOT_PREDICTED,
    ),
    Field(
        "round_chance",
        "float",
        "",
        "a round's cell: the chance a round adds it, from the first seeds' scatter",
        "not a round's cell, or the scatter is not measured yet",
    ),
    Field("time_limit_min", "int", "min", "what its job asks SLURM for at its first attempt", NOT_PREDICTED),
    Field("source", "str", "", "this study, earlier study or formula (config/prediction.py)", NOT_PREDICTED, text=True),
    Field("method", "str", "", "how it was predicted", NOT_PREDICTED, text=True),
    Field("note", "str", "", "the prediction's source in words, or why the cell is left out", "none", text=True),
)
BILL = Record(
    "bill.csv",
    "results/plan/bill.csv",
    "The bill (config/bill.py): every start, a dry run too, predicts each cell's job wall and GPU-hours from the "
    "best source it has; one row per cell of the matrix, the left-out ones with their reason.",
    BILL_COLUMNS,
)
SUBMITTED = Record(
    "submitted.csv",
    "results/plan/submitted.csv",
    "Each cell's prediction as the last run that trains it started it (config/bill.py), bill.csv's row of that "
    "start: the report's cost table sets it against what the cell took (cost.csv).",
    BILL_COLUMNS,
)
# provenance.csv: runs.csv's provenance columns but the JSON ones, then one column per differing setting
PROVENANCE_TABLE = Record(
    "provenance.csv",
    "results/summary/provenance.csv",
    "One row per cell of this study (analysis/collect.py `provenance`): where and with what it ran, runs.csv's "
    "provenance columns but its JSON ones; after them, a `training.<setting>` column for each resolved training "
    "setting whose value differs between cells (run.json's training, flattened).",
    (
        SOURCE,
        *CELL_KEYS,
        Field("status", "str", "", "the cell's status in runs.csv", text=True),
        # a reason column it names is runs.csv's
        *(
            replace(column, empty=f"runs.csv's {column.empty}") if column.empty.endswith("_reason") else column
            for column in PROVENANCE
            if column.name not in JSON_COLUMNS
        ),
    ),
    open=True,
)
INCOMPLETE = Record(
    "incomplete.csv",
    "results/summary/incomplete.csv",
    "The cells that are not ok with the command that reruns each, one that reruns them all, an imported study's "
    "skipped files and the cells the matrix left out (analysis/completeness.py).",
    (
        Field(
            "item",
            "str",
            "",
            "the cell's folder under results/runs, `all of the above`, an imported study's skipped file, or a "
            "left-out pair or GPU count",
            text=True,
        ),
        Field(
            "status",
            "str",
            "",
            "the cell's status (runs.csv), `skipped (legacy import)` or `left out`",
            "the row that reruns them all",
            text=True,
        ),
        Field("reason", "str", "", "why (for the row that reruns them all: how many cells)", text=True),
        Field(
            "rerun",
            "str",
            "",
            "the command that reruns it as the study was run (its config files, overrides and profile)",
            "nothing reruns it (a skipped file, a left-out cell)",
            text=True,
        ),
    ),
)
NO_RUN_JSON = "no run.json"
# ranks.csv's figures of a rank: the rank record's own fields (records/definitions.py RANK)
RANK_FIGURES = tuple(field for field in RANK.fields if field.name not in ("rank", "host"))
RANKS = Record(
    "ranks.csv",
    "results/summary/ranks.csv",
    "One row per cell, epoch and rank of every epoch record with per-rank rows (metrics.jsonl's `ranks`), "
    "whatever the cell's status (analysis/ranks.py); a cell without them has none (runs.csv's step_split_reason "
    "says why). Its times are seconds of that rank in that epoch.",
    (
        *CELL_KEYS,
        Field("start", "str", "UTC", "when the cell's rank 0 started (run.json)", NO_RUN_JSON, text=True),
        Field("slurm_job_id", "str", "", "the cell's SLURM job", "outside SLURM", text=True),
        Field("epoch", "int", "", "the epoch, from 1 (the first is the warm-up)"),
        Field(
            "unsteady",
            "bool",
            "",
            "the epoch is left out of the steady figures: it traced steps (training.profile) or was the first "
            "after a resume (`resumed`)",
        ),
        Field(
            "node_set",
            "int",
            "",
            "the set of nodes the epoch ran on, from 0: a requeued or retried cell that resumed on other nodes "
            "has more than one (measures.placement)",
            "the epoch names no hosts (an older record)",
        ),
        RANK.by_name["rank"],
        replace(RANK.by_name["host"], meaning="the rank's node (SLURM's node name, else the hostname)", text=True),
        *RANK_FIGURES,
    ),
)
# A cell's collectives.csv: the one table the ranks write (train/collectives.py); the analysis
# gathers them (analysis/collectives.py)
MEASURED_NOT = "reason"
CELL_COLLECTIVES = Record(
    "collectives.csv",
    "results/runs/<cell>/collectives.csv",
    "A cell's collective benchmark (training.collectives, train/collectives.py), in a cell of more than one "
    "replica: one row per operation and message size, timed on the cell's ranks before training; rank 0 writes it.",
    (
        Field("op", "str", "", "the operation: all_reduce, reduce, all_gather, reduce_scatter, broadcast, ..."),
        Field("bytes", "int", "bytes", "the message (nccl-tests' sizes: all-gather's output, reduce-scatter's input)"),
        Field(
            "size",
            "str",
            "",
            "why this size was measured: gradient (the model's gradients), bucket (the backend's bucket or fusion "
            "size, where the sweep has it too) or sweep",
        ),
        Field("dtype", "str", "", "the elements' type (float32, the gradients')"),
        Field("ranks", "int", "", "the ranks that ran it"),
        Field("library", "str", "", "the library the backend reduces with (nccl, gloo, horovod gloo, ...)", text=True),
        Field(
            "iterations",
            "int",
            "",
            "timed iterations (fewer than training.collectives.iterations where the budget was short)",
            MEASURED_NOT,
        ),
        Field("latency_us", "float", "us", "the median over iterations of the slowest rank's time", MEASURED_NOT),
        Field("latency_min_us", "float", "us", "the fastest iteration's", MEASURED_NOT),
        Field("latency_max_us", "float", "us", "the slowest iteration's", MEASURED_NOT),
        Field("algbw_gbps", "float", "GB/s", "bytes / latency (10^9 bytes per second)", MEASURED_NOT),
        Field("busbw_gbps", "float", "GB/s", "algbw x the operation's bus factor (nccl-tests)", MEASURED_NOT),
        Field("reason", "str", "", "why the figures are empty (over the budget, a failure)", "measured", text=True),
    ),
)
# Where a cell ran, from its run.json: the summary's columns beside its collectives.csv's
COLLECTIVE_CELL = (
    Field("nodes", "int", "", "nodes the cell ran on", NO_RUN_JSON),
    Field("device", "str", "", "cuda or cpu, as the cell resolved training.device", NO_RUN_JSON, text=True),
    Field("model_width", "int", "", "model.width", "no run.json, or one from before model.width"),
    Field("gradient_bytes", "int", "bytes", "the gradients a step reduces (float32)", "no run.json, or before it"),
)
COLLECTIVES = Record(
    "collectives.csv",
    "results/summary/collectives.csv",
    "Every cell's collectives.csv gathered, with the cell's keys and where it ran beside each size "
    "(analysis/collectives.py); a cell without one (one replica, not run yet, trained before the benchmark) adds "
    "no rows: runs.csv's collective_reason says why.",
    (*CELL_KEYS, *COLLECTIVE_CELL, *CELL_COLLECTIVES.fields),
)
# scaling.csv (analysis/scaling.py): per series and GPU count, each metric's mean, speedup and
# efficiency with a 95% interval over seeds, then the series' scaling model (timing/scaling_model.py)
NO_USABLE = "no usable cell (status ok, both timings known)"
ONE_SEED = "one seed here or at the base (interval none)"


def with_interval(name: str, unit: str, meaning: str, empty: str, bounds_empty: str) -> tuple[Field, ...]:
    """A figure's column and its 95% interval's two, name_lo and name_hi."""
    return (
        Field(name, "float", unit, meaning, empty),
        Field(f"{name}_lo", "float", unit, f"{name}'s 95% interval, low end", bounds_empty),
        Field(f"{name}_hi", "float", unit, "its high end", bounds_empty),
    )


def scaled(name: str, what: str, per_work: bool) -> tuple[Field, ...]:
    """One metric's columns: its mean, its speedup and efficiency over the series' base, each with
    its interval; the time to target, which a usable cell may lack, with its own count and method."""
    empty = "no usable cell reached the target here or at the base" if name == "time_to_target" else NO_USABLE
    counted = (
        Field("time_to_target_used", "int", "", "the usable cells that reached the target"),
        Field(
            "time_to_target_interval",
            "str",
            "",
            "the method of its intervals, as `interval` (no cell reached it)",
        ),
    )
    work = ", per unit of work (work_ratio)" if per_work else " (a time to a quality: not scaled by the work)"
    return (
        *(counted if name == "time_to_target" else ()),
        Field(f"{name}_mean_s", "float", "s", f"{what}: the mean over the usable cells", empty),
        *with_interval(f"speedup_{name}", "", f"the base's mean {what} over this count's{work}", empty, ONE_SEED),
        *with_interval(f"efficiency_{name}", "", f"speedup_{name} x base_gpus / gpus", empty, ONE_SEED),
    )


NOT_FITTED = "the series is refused (model_note says why)"
NO_BAND = "refused, or the fit has no degrees of freedom left"
# The model's terms, each a column with its interval (timing/scaling_model.py TERMS: every term of either form)
MODEL_TERMS = {
    "compute": "the fitted compute: seconds of an epoch that divide by N",
    "floor": "the fitted per-step floor (strong form): seconds of an epoch that do not divide",
    "latency": "the fitted latency of the collectives, with more than one rank",
    "bandwidth": "the fitted ring bandwidth, times (N-1)/N (weak form)",
    "node_step": "the fitted step where the ranks span more than one node",
}
NOT_BACKTESTED = "not back-tested (backtest_note says why)"
BACKTEST = (
    Field("backtest_gpus", "int", "GPUs", "the largest GPU count, held out of the refit", NOT_BACKTESTED),
    Field("backtest_predicted_epoch_s", "float", "s", "the refit's epoch time there", NOT_BACKTESTED),
    *with_interval(
        "backtest_predicted_efficiency", "", "the refit's parallel efficiency there", NOT_BACKTESTED, NO_BAND
    ),
    Field("backtest_measured_epoch_s", "float", "s", "the held-out cells' mean epoch time", NOT_BACKTESTED),
    Field(
        "backtest_measured_efficiency",
        "float",
        "",
        "their parallel efficiency, against the series' smallest GPU count",
        NOT_BACKTESTED,
    ),
    Field("backtest_error", "float", "", "predicted - measured efficiency", NOT_BACKTESTED),
    Field("backtest_note", "str", "", "the back-test in words, or why the series is not back-tested"),
)
# per series, repeated on each of its rows
MODEL_SERIES = (
    Field("model_status", "str", "", "fitted or refused"),
    Field("model_form", "str", "", "the form fitted: weak or strong (runs.csv scaling)", NOT_FITTED),
    Field(
        "model_communication",
        "str",
        "",
        "measured (the step split's exposed communication) or inferred from the fit",
        NOT_FITTED,
    ),
    Field("model_terms", "str", "", "the terms fitted, joined by ' + '", NOT_FITTED),
    Field("model_points", "int", "", "the distinct (GPUs, nodes) points fitted", NOT_FITTED),
    *(
        column
        for term, meaning in MODEL_TERMS.items()
        for column in with_interval(
            f"model_{term}_s", "s", meaning, "refused, or a term the form or the cells leave out", NO_BAND
        )
    ),
    Field(
        "model_poor_fit",
        "bool",
        "",
        "the model does not describe the measured points (a term below zero beyond its interval, or a point "
        "off the fit with the lack-of-fit test rejecting)",
        NOT_FITTED,
    ),
    Field("model_note", "str", "", "the fit's notes, or why the series is refused"),
    Field(
        "model_predicted_gpus",
        "int",
        "GPUs",
        "twice the largest measured GPU count: where the model predicts",
        NOT_FITTED,
    ),
    Field("model_predicted_nodes", "int", "", "the nodes that count spans", NOT_FITTED),
    *with_interval("model_predicted_epoch_s", "s", "the model's epoch time there", NOT_FITTED, NO_BAND),
    *with_interval(
        "model_predicted_efficiency",
        "",
        "the model's parallel efficiency there, against the series' smallest GPU count",
        NOT_FITTED,
        NO_BAND,
    ),
    *BACKTEST,
)
# per row: the fit at the row's GPU count
MODEL_ROW = (
    *with_interval("model_epoch_s", "s", "the fit at this GPU count", NOT_FITTED, NO_BAND),
    Field("model_compute_epoch_s", "float", "s", "its compute", NOT_FITTED),
    Field("model_floor_epoch_s", "float", "s", "its per-step floor (strong form)", NOT_FITTED),
    Field("model_communication_epoch_s", "float", "s", "its communication", NOT_FITTED),
    Field("model_residual", "float", "", "the measured mean over the fit, less 1", "refused, or no cell fitted here"),
)
BACKTEST_COLUMNS = names(BACKTEST)
MODEL_SERIES_COLUMNS = names(MODEL_SERIES)
MODEL_ROW_COLUMNS = names(MODEL_ROW)
SERIES = (SOURCE, *CELL_KEYS[:3])  # a series: one source, framework, backend and variant
SCALING = Record(
    "scaling.csv",
    "results/summary/scaling.csv",
    "One row per series (source, framework, backend, variant) and GPU count (analysis/scaling.py): speedup and "
    "parallel efficiency against the series' base with 95% intervals over seeds, and the series' scaling model "
    "(timing/scaling_model.py; docs/report.md: the scaling model).",
    (
        *SERIES,
        CELL_KEYS[3],
        Field("base_gpus", "int", "GPUs", "the series' base: its smallest GPU count with usable cells", NO_USABLE),
        Field("cells", "int", "", "the cells at this count, any status"),
        Field("used", "int", "", "the usable ones: status ok, training and steady epoch time known"),
        Field("excluded", "int", "", "the others"),
        Field("excluded_status", "str", "", "their statuses, counted ('failed 1, oom 2')", "none excluded"),
        Field(
            "interval",
            "str",
            "",
            "the method of the intervals: paired t (every seed ran at the base too), log-ratio t, none (one "
            "seed), or no usable cells",
        ),
        Field(
            "work_ratio",
            "float",
            "",
            "an epoch's images here over the base's: 1 unless training.steps_per_epoch fixes the steps",
            NO_USABLE,
        ),
        *scaled("train_time", "total training time (runs.csv train_time_s)", True),
        *scaled("epoch_time", "steady epoch time (runs.csv steady_epoch_s)", True),
        *scaled("time_to_target", "time to the target validation IOU (runs.csv time_to_target_s)", False),
        Field("iou_mean", "float", "", "the test pairs' IOU (runs.csv iou): the mean over the usable cells", NO_USABLE),
        Field("iou_lo", "float", "", "its 95% interval, low end", "fewer than two usable cells"),
        Field("iou_hi", "float", "", "its high end", "fewer than two usable cells"),
        Field(
            "images_per_s_per_gpu_mean",
            "float",
            "images/s",
            "runs.csv images_per_s_per_gpu: the mean over the usable cells",
            NO_USABLE,
        ),
        *MODEL_SERIES,
        *MODEL_ROW,
    ),
)
NO_SPLIT_HERE = "reason"
WATERFALL = Record(
    "waterfall.csv",
    "results/summary/waterfall.csv",
    "The loss waterfall (analysis/waterfall.py; docs/report.md: the loss waterfall): per series and GPU count "
    "above its base, the measured steady epoch split into the ideal and additive measured terms, each the mean "
    "over the seeds with its 95% t-interval.",
    (
        *SERIES,
        Field("gpus", "int", "GPUs", "the GPU count, above the base"),
        Field("base_gpus", "int", "GPUs", "the series' base: its smallest GPU count with usable cells"),
        Field(
            "term",
            "str",
            "",
            "ideal, compute_growth, imbalance, exposed_comm, data_wait, rest, or measured (their sum)",
            text=True,
        ),
        Field("seconds", "float", "s", "the term: the mean over the seeds at this count", NO_SPLIT_HERE),
        Field("share", "float", "", "seconds over the mean measured epoch", NO_SPLIT_HERE),
        Field("low", "float", "s", "its 95% t-interval over the seeds, low end", "one seed, or reason"),
        Field("high", "float", "s", "its high end", "one seed, or reason"),
        Field("seeds", "int", "", "the cells it is the mean of (0: none has the step split)"),
        Field(
            "reason",
            "str",
            "",
            "why the row is empty (no per-rank step split here or at the base), or the cells left out",
            "every cell counts",
            text=True,
        ),
    ),
)
NOT_COMPARED = "one host, or no cell shared with another host"
HOSTS = Record(
    "hosts.csv",
    "results/summary/hosts.csv",
    "Slow nodes (analysis/hosts.py; docs/report.md: slow hosts and drift): per host that ran ranks of a cell with "
    "status ok and per measure, its ranks against the other hosts' ranks of the same cells and epochs.",
    (
        Field("host", "str", "", "the node (SLURM's node name, else the hostname)", text=True),
        Field("measure", "str", "", "compute, exposed communication or data wait", text=True),
        Field(
            "ratio",
            "float",
            "",
            "the host's ranks over the other hosts' ranks of the same cells and epochs: the geometric mean over cells",
            NOT_COMPARED,
        ),
        Field("low", "float", "", "its 95% interval (Bonferroni over the hosts compared), low end", "under 3 cells"),
        Field("high", "float", "", "its high end", "under 3 cells"),
        Field("cells", "int", "", "the cells in which the host's ranks were compared with another host's", "one host"),
        Field("rank_epochs", "int", "", "its rank-epochs compared", "one host"),
        Field(
            "excess_share",
            "float",
            "",
            "the host's extra seconds in the measure over the others' epoch time, the mean over cells",
            NOT_COMPARED,
        ),
        Field(
            "verdict",
            "str",
            "",
            "`slower by 9% (6-12%) in 14 cells` (compute; `longer by` for communication and data wait), `faster by`, "
            "`no different`, `no different beyond 5%: ...`, `no different: ..., but under 1% of an epoch`, `too few "
            "cells to tell (2 shared with another host; 3 needed)`, `one host: nothing to compare`",
            text=True,
        ),
        Field(
            "slow_node",
            "bool",
            "",
            "the host is named slow: compute or data wait slower with the interval's low end above 1.05, by at "
            "least 1% of an epoch",
        ),
        Field(
            "rerun",
            "str",
            "",
            "for a slow node: the command that reruns every cell it ran, with it in cluster.exclude (run it from "
            "anywhere)",
            "not a slow node",
            text=True,
        ),
    ),
)
NO_DRIFT_FIT = "too few cells or starts to fit a line (verdict)"
DRIFT = Record(
    "drift.csv",
    "results/summary/drift.csv",
    "Drift over the study (analysis/drift.py): per measure, a line through the log residuals (order.csv) against "
    "the hours since the first start, within each configuration.",
    (
        Field("measure", "str", "", "epoch, compute, exposed communication or data wait", text=True),
        Field("change", "float", "", "the fitted change from the first start to the last, as a ratio", NO_DRIFT_FIT),
        Field("low", "float", "", "its 95% interval (Bonferroni over the measures), low end", NO_DRIFT_FIT),
        Field("high", "float", "", "its high end", NO_DRIFT_FIT),
        Field("cells", "int", "", "the cells with a residual and a start"),
        Field("hours", "float", "h", "from the first of their starts to the last", "no such cell"),
        Field(
            "verdict",
            "str",
            "",
            "the verdict in words (later cells slower by ..., no drift the cells can show)",
            text=True,
        ),
    ),
)
NO_RESIDUAL = "not ok, the measure missing, or its configuration has one such cell"
ORDER = Record(
    "order.csv",
    "results/summary/order.csv",
    "The study's run order as it happened (analysis/drift.py): one row per cell of this study, in the order the "
    "cells started (those that never did last), with each measure over its configuration's geometric mean.",
    (
        *CELL_KEYS,
        Field("status", "str", "", "the cell's status in runs.csv", text=True),
        Field(
            "block",
            "int",
            "",
            "the cell's block (its seed's place in matrix.seeds; order.blocks)",
            "without order.blocks",
        ),
        Field("run_order", "int", "", "its place in the drawn order, from 1", "order.seed null: Snakemake's own order"),
        Field("start", "str", "UTC", "when rank 0 started (run.json)", "it never started", text=True),
        Field("start_order", "int", "", "its place among the cells' starts, from 1", "it never started"),
        Field("hours", "float", "h", "from the study's first start", "it never started"),
        Field("slurm_job_id", "str", "", "the cell's SLURM job", "outside SLURM", text=True),
        Field("hosts", "str", "", "its ranks' hosts, comma-separated", text=True),
        Field("host_analysis", "str", "", "why the cell is not in the host comparison", "it is", text=True),
        Field(
            "residual_epoch", "float", "", "its steady epoch time over its configuration's geometric mean", NO_RESIDUAL
        ),
        Field("residual_compute", "float", "", "its compute (median over ranks), alike", NO_RESIDUAL),
        Field(
            "residual_comm_exposed", "float", "", "its exposed communication (median over ranks), alike", NO_RESIDUAL
        ),
        Field("residual_data_wait", "float", "", "its data wait (median over ranks), alike", NO_RESIDUAL),
    ),
)
# baseline.csv's comparisons, each with the words of its flag: images/s, the parallel efficiency of the
# total training time, and the time to target
COMPARED = {
    "images_per_s": ("the mean images/s", "faster or slower"),
    "efficiency": (
        "the parallel efficiency of the total training time, against the study's own base",
        "higher or lower",
    ),
    "time_to_target": ("the mean time to the target validation IOU", "faster (below 1) or slower"),
}
NO_RATIO = "note says why"


def compared(name: str, what: str, flags: str) -> tuple[Field, ...]:
    """baseline.csv's columns of one comparison: each study's value, the ratio with its interval, its flag."""
    unit = "images/s" if name == "images_per_s" else "s" if name == "time_to_target" else ""
    return (
        Field(f"{name}_here", "float", unit, f"{what}, this study", NO_RATIO),
        Field(f"{name}_baseline", "float", unit, "the same, the baseline", NO_RATIO),
        *with_interval(f"{name}_ratio", "", "this study over the baseline", NO_RATIO, "one seed on a side, or note"),
        Field(f"{name}_change", "str", "", f"{flags}: where the interval excludes 1", "the interval holds 1, or none"),
    )


BASELINE = Record(
    "baseline.csv",
    "results/summary/baseline.csv",
    "This study against a baseline study (compare.baseline; analysis/baseline.py): one row per cell key of "
    "either study, the ratios this study / baseline with 95% intervals from both studies' seeds.",
    (
        *CELL_KEYS[:4],
        Field("present", "str", "", "both, this study only, or baseline only"),
        Field("cells_here", "int", "", "this study's usable cells of the key"),
        Field("cells_baseline", "int", "", "the baseline's"),
        *(column for name, (what, flags) in COMPARED.items() for column in compared(name, what, flags)),
        Field("note", "str", "", "why a ratio is empty, or has no interval", "only one study has the key"),
        Field(
            "provenance_differences",
            "str",
            "",
            "what differs between the two studies' cells and could explain a change, as baseline -> this study",
            "only one study has the key",
        ),
    ),
)

# The history's tables (analysis/history_changes.py): with history.path set
HISTORY_SERIES = (
    Field(
        "site",
        "str",
        "",
        "the devices the cell key's cells ran on (runs.csv's devices): a series' site",
        "none recorded",
        text=True,
    ),
    Field("config_hash", "str", "", "the cells' config hashes: a series' setting", "none recorded", text=True),
    *CELL_KEYS[:4],
    Field(
        "figure",
        "str",
        "",
        "efficiency, images_per_s_per_gpu, time_to_target_s, busbw_gbps, or waterfall_<term> (the loss "
        "waterfall's compute_growth, imbalance, exposed_comm, data_wait, rest)",
        text=True,
    ),
)
HISTORY = Record(
    "history.csv",
    "results/summary/history.csv",
    "Each key figure of each cell key per study of the history and this one (analysis/history_changes.py; "
    "docs/report.md: the history across studies): one row per study and series (site, setting, cell key, "
    "figure) with a value.",
    (
        Field("study", "str", "", "the study's id (analysis/history.py: a hash of its runs.csv)", text=True),
        Field("position", "int", "", "its place in the history, oldest first (by its first cell's start)"),
        Field("start", "str", "", "its first cell's start (ISO 8601)", "its tables predate the times", text=True),
        Field("this_study", "bool", "", "whether it is the study this report is of"),
        *HISTORY_SERIES,
        Field("value", "float", "", "the figure in this study: the mean over its cells (efficiency: of the means)"),
        Field("low", "float", "", "its 95% interval from the study's own seeds, low end", "one cell on a side"),
        Field("high", "float", "", "its high end", "one cell on a side"),
        Field("n", "int", "", "the cells the value rests on (efficiency: at this GPU count)"),
        Field("level", "int", "", "the series' level: 1, and one more after each change point before this study"),
    ),
)
CHANGES = Record(
    "changes.csv",
    "results/summary/changes.csv",
    "The change points found across the history (analysis/change_points.py): one row per change of a series' "
    "level, with its size, interval, p-value and what changed between the studies on either side.",
    (
        *HISTORY_SERIES,
        Field("study", "str", "", "the first study of the new level", text=True),
        Field("study_start", "str", "", "its first cell's start", "its tables predate the times", text=True),
        Field("position", "int", "", "its place in the history"),
        Field("studies_before", "int", "", "the studies of the level before (since the previous change, or the first)"),
        Field("studies_after", "int", "", "the studies of the new level (until the next change, or the last)"),
        Field("mean_before", "float", "", "the figure's mean over the studies before"),
        Field("mean_after", "float", "", "the same after"),
        Field("size", "float", "", "the change: after / before, or after - before (size_as)"),
        Field("size_lo", "float", "", "its 95% interval (Welch), low end", "one study on a side"),
        Field("size_hi", "float", "", "its high end", "one study on a side"),
        Field(
            "size_as",
            "str",
            "",
            "after / before (a ratio), or after - before (the waterfall's terms, seconds)",
            text=True,
        ),
        Field("direction", "str", "", "worse or better, for this figure", text=True),
        Field("p_value", "float", "", "the permutation test's p-value of the split (E-Divisive's rule)"),
        Field("alpha", "float", "", "history.change_alpha: the p-value below which a split is a change"),
        Field(
            "provenance_changes",
            "str",
            "",
            "what differs between the cell key's cells of the studies on either side, as compare.baseline says it",
            text=True,
        ),
    ),
)

# Every table the study writes, in the order the data flows (docs/tables.md lists them so)
TABLES = (
    BILL,
    SUBMITTED,
    RUNS,
    EPOCHS,
    PROVENANCE_TABLE,
    INCOMPLETE,
    RANKS,
    CELL_COLLECTIVES,
    COLLECTIVES,
    SCALING,
    WATERFALL,
    VERDICTS,
    ROUNDS,
    COST,
    HOSTS,
    DRIFT,
    ORDER,
    BASELINE,
    HISTORY,
    CHANGES,
)
