"""The records a cell writes, field by field: metrics.jsonl's epoch records (with each rank's step
split) and final record, and run.json (with its training settings, collective benchmark summary,
observed compilation and SLURM job). docs/records.md is generated from here
(tools/records_reference.py); the writers' builders are checked against it and the analysis
reads through it (fields.Record.read).

A field that holds a config setting as the cell was given it takes its type, unit and meaning
from config/schema.yaml (`setting`, scalebench/config_keys.py): the key is declared there and in
its typed settings class (settings.py), and stated nowhere else. Only what a rank resolved or
computed (the global batch, the scaled rate, the device as resolved, ...) has a meaning written
here."""

from __future__ import annotations

from scalebench import config_keys
from scalebench.records.fields import Field, Record


def setting(path: str, name: str = "", schema: dict | None = None) -> Field:
    """The field holding config key `path` (e.g. training.epochs) as the cell's settings gave it,
    under `name` (the key's last part by default): type, unit, meaning and when it is empty are
    config/schema.yaml's."""
    node = config_keys.key(path, schema)
    return Field(
        name or path.rsplit(".", 1)[-1],
        config_keys.record_type(node),
        config_keys.unit(path),
        config_keys.meaning(path, schema),
        config_keys.when_null(path, schema) if config_keys.nullable(node) else "",
    )


RANK = Record(
    "rank",
    "metrics.jsonl, an epoch record's `ranks`",
    "One rank's epoch, as its framework's marks measured it (train/step_timing.py).",
    (
        Field("rank", "int", "", "the rank"),
        Field("host", "str", "", "the rank's node"),
        Field("epoch_time_s", "float", "s", "the rank's epoch"),
        Field("compute_s", "float", "s", "its steps less their exposed communication", "not measured"),
        Field("comm_exposed_s", "float", "s", "its steps' communication nothing computed behind", "not measured"),
        Field("data_wait_s", "float", "s", "waiting for the next batch", "not measured"),
        Field("rest_s", "float", "s", "the epoch less its steps and data waits", "not measured"),
        Field("steps", "int", "", "steps the rank timed", "not measured"),
        Field("step_median_s", "float", "s", "a step's median time", "not measured"),
        Field("step_p90_s", "float", "s", "a step's 90th percentile time", "not measured"),
        Field("step_max_s", "float", "s", "the rank's longest step", "not measured"),
        Field("comm_total_s", "float", "s", "seconds with communication in flight", "the epoch's comm_total_reason"),
        Field("comm_overlap", "float", "share", "1 - exposed / total communication", "the epoch's comm_total_reason"),
    ),
)

# The epoch record's step split (train/step_timing.py writes it, timing/step_split.py reads it);
# docs/step-split.md lists the same fields and meanings (a test keeps both equal).
STEP_SPLIT = (
    Field(
        "compute_s",
        "float",
        "s",
        "seconds of the steps not spent in exposed communication, median over ranks",
        "step_split_reason",
    ),
    Field("compute_max_s", "float", "s", "the same, the slowest rank's", "step_split_reason"),
    Field(
        "comm_exposed_s",
        "float",
        "s",
        "seconds of the steps spent in communication nothing computed behind, median over ranks",
        "step_split_reason",
    ),
    Field("comm_exposed_max_s", "float", "s", "the same, the largest rank's", "step_split_reason"),
    Field(
        "data_wait_median_s",
        "float",
        "s",
        "seconds waiting for the next batch, median over ranks (data_wait_s: the slowest's)",
        "step_split_reason",
    ),
    Field(
        "rest_s",
        "float",
        "s",
        "seconds of the epoch outside steps and data waits, median over ranks",
        "step_split_reason",
    ),
    Field("rest_max_s", "float", "s", "the same, the largest rank's", "step_split_reason"),
    Field(
        "comm_total_s",
        "float",
        "s",
        "seconds with communication in flight, median over ranks (empty: comm_total_reason)",
        "comm_total_reason",
    ),
    Field(
        "comm_overlap",
        "float",
        "share",
        "share of comm_total_s overlapped with compute, 1 - exposed / total, median over ranks",
        "comm_total_reason",
    ),
    Field("comm_total_reason", "str", "", "why comm_total_s and comm_overlap are empty", "None when they are measured"),
    Field("step_median_s", "float", "s", "a step's median time, median over ranks", "step_split_reason"),
    Field("step_p90_s", "float", "s", "a step's 90th percentile time, the largest over ranks", "step_split_reason"),
    Field("step_max_s", "float", "s", "the longest step of any rank", "step_split_reason"),
    Field(
        "compute_spread",
        "float",
        "share",
        "(largest - smallest) / median of the ranks' compute_s: how unevenly ranks compute",
        "step_split_reason; None where the median is 0",
    ),
    Field("straggler_rank", "int", "", "the rank with the largest compute_s", "step_split_reason"),
    Field("straggler_host", "str", "", "that rank's host", "step_split_reason"),
    Field(
        "step_split_reason",
        "str",
        "",
        "why the split fields are empty (training.step_split off, a record from before it)",
        "None when they are measured",
    ),
    Field(
        "ranks",
        "list",
        "",
        "per rank, in rank order: rank, host, epoch_time_s, compute_s, comm_exposed_s, data_wait_s, rest_s, "
        "steps, step_median_s, step_p90_s, step_max_s, comm_total_s, comm_overlap",
        "step_split_reason",
        part=RANK,
    ),
    Field(
        "profiled", "bool", "", "this epoch traced steps with training.profile: left out of the steady-state figures"
    ),
    Field(
        "profile_trace", "str", "", "the trace's folder, relative to the cell (empty: profile_reason)", "profile_reason"
    ),
    Field("profile_reason", "str", "", "why a trace asked for is missing", "None when there is none to explain"),
)

EPOCH = Record(
    "epoch",
    "metrics.jsonl, one line per epoch (`type` epoch)",
    "An epoch's figures, reduced over the ranks by rank 0 (train/metrics.py epoch_record, the loop).",
    (
        Field("type", "str", "", "epoch"),
        Field("epoch", "int", "", "the epoch, from 1"),
        Field("loss", "float", "", "the epoch's mean training loss"),
        Field("lr", "float", "", "the rate the optimizer held after the epoch's steps, read back from it"),
        Field("scheduled_lr", "float", "", "the rate the schedule set (train/lr_schedule.py)"),
        Field("epoch_time_s", "float", "s", "the epoch's time, the slowest rank's"),
        Field("images_per_s", "float", "images/s", "images the epoch saw over its time, all replicas"),
        Field("data_wait_s", "float", "s", "waiting for batches, the slowest rank's"),
        Field("peak_mem_mb", "float", "MiB", "peak device (or host) memory, the largest rank's"),
        Field("steps", "int", "", "batches summed over replicas"),
        Field("images", "int", "", "images the epoch saw (steps x batch), all replicas"),
        Field("optimizer_steps", "int", "", "optimizer steps of each replica (fewer than batches when accumulating)"),
        Field("train_time_s", "float", "s", "the epochs' summed time so far"),
        Field("energy_j", "float", "J", "the epoch's joules summed over ranks", "run.json's energy_reason"),
        Field("val_iou", "float", "", "validation IOU", "not an evaluation epoch (training.eval_every)"),
        Field("val_loss", "float", "", "validation loss", "not an evaluation epoch (training.eval_every)"),
        Field("model_tflops", "float", "TFLOP/s", "the model's achieved training FLOP rate, all devices"),
        Field("mfu", "float", "share", "model FLOPs utilisation per device", "run.json's peak_tflops is empty"),
        Field(
            "resumed",
            "bool",
            "",
            "the first epoch a run trained after resuming from the checkpoint of the epoch before (a retry, a "
            "requeued or restarted job): a warm-up again, left out of the steady-state figures",
        ),
        *STEP_SPLIT,
        Field("test_iou", "float", "", "the test pairs' IOU during training (before validation pairs)", old=True),
    ),
)

FINAL = Record(
    "final",
    "metrics.jsonl, the last line (`type` final)",
    "How the cell ended (records.final_record, the loop's evaluation and cost; outcome.py for oom and refused).",
    (
        Field("type", "str", "", "final"),
        Field("status", "str", "", "ok, diverged, oom or refused"),
        Field("setup_s", "float", "s", "start-up before the first epoch", "an oom or refused cell"),
        Field("train_time_s", "float", "s", "the epochs' summed time"),
        Field("epochs_completed", "int", "", "epochs trained"),
        Field("stopped_at_target", "bool", "", "training ended early at training.target_iou (training.stop_at_target)"),
        Field("test_loss", "float", "", "the test pairs' loss", "status not ok"),
        Field("iou", "float", "", "the test pairs' IOU", "status not ok"),
        Field("test_time_s", "float", "s", "evaluating the test pairs", "status not ok"),
        Field(
            "train_gpu_hours",
            "float",
            "h",
            "GPUs x train_time_s: the epochs' share",
            "an oom or refused cell",
            was="gpu_hours",
        ),
        Field("energy_j", "float", "J", "joules over the epochs, all ranks", "energy_reason"),
        Field("energy_source", "str", "", "nvml (the GPUs) or rapl (the nodes' CPU packages)", "energy_reason"),
        Field("energy_reason", "str", "", "why energy_j is empty", "None when measured"),
    ),
)

# The training settings run.json's `training` leaves out: they change no step (the report's own
# choices, the TensorBoard curves, the step split's marks and the profile window: measurements,
# which the same ops train through). train/provenance.py training_record reads these.
NOT_RECORDED = ("predictions", "tensorboard", "step_split", "profile")
# Sections recorded by the backends that have them, in their options (Backend.options): horovod.
BACKEND_SECTIONS = ("horovod",)

# What a rank resolved or computed, in run.json's `training` beside the settings: a field here
# replaces the setting of its name (the value as resolved, not as asked), or joins them.
RESOLVED = (
    Field("global_batch", "int", "", "images per optimizer step over all replicas, as the cell's scaling made it"),
    Field("backward_passes_per_step", "int", "", "batches per optimizer step: 1 unless the backend accumulates"),
    Field("scaled_lr", "float", "", "the rate after warm-up, before any decay"),
    Field("compression", "str", "", "the gradients' type in the reduction, as the backend applied it"),
    Field("deterministic", "bool", "", "deterministic kernels, as resolved"),
    Field("device", "str", "", "cuda or cpu, what training.device resolved to", old_words=(("gpu", "cuda"),)),
    Field("threads_per_rank", "int", "", "threads each rank ran with"),
    Field("target_iou", "float", "", "training.target_iou where training stops there", "stop_at_target off"),
    Field(
        "loader",
        "object",
        "",
        "training.loader as the framework applies it (placement and share; PyTorch's workers too)",
    ),
)


def training_fields(schema: dict | None = None) -> tuple[Field, ...]:
    """run.json's `training` fields: every key of the schema's training section in its order (but
    NOT_RECORDED and BACKEND_SECTIONS), each the setting's field or, where the rank resolves it,
    RESOLVED's of its name; then the resolved values that are no setting."""
    keys = config_keys.key("training", schema)["properties"]
    resolved = {field.name: field for field in RESOLVED}
    fields = [
        resolved.get(name) or setting(f"training.{name}", schema=schema)
        for name in keys
        if name not in NOT_RECORDED and name not in BACKEND_SECTIONS
    ]
    return (*fields, *(field for field in RESOLVED if field.name not in keys))


TRAINING = Record(
    "training",
    "run.json's `training`",
    "The settings the cell trained with, as it resolved them (train/provenance.py training_record): every "
    "training setting but those that change no step, its meaning from config/schema.yaml, and the values the "
    "rank resolved; a backend's own options beside them (horovod, dp, fsdp, tf_strategy, ...).",
    training_fields(),
    open=True,
)

COLLECTIVES = Record(
    "collectives",
    "run.json's `collectives`",
    "The backend's own collective benchmark at the gradient size (train/collectives.py run_fields).",
    (
        Field("library", "str", "", "the library the backend's collectives went through", "reason"),
        Field("ranks", "int", "", "the replicas that took part"),
        Field("op", "str", "", "all_reduce, or DataParallel's reduce", "reason"),
        Field("gradient_bytes", "int", "bytes", "the message size measured", "reason"),
        Field("latency_us", "float", "us", "the operation's time", "reason"),
        Field("algbw_gbps", "float", "GB/s", "bytes / time (nccl-tests' algbw)", "reason"),
        Field("busbw_gbps", "float", "GB/s", "algbw x the operation's bus factor (nccl-tests' busbw)", "reason"),
        Field("fusion_bytes", "int", "bytes", "the backend's fusion buffer", "fusion_source"),
        Field("fusion_source", "str", "", "where fusion_bytes came from", "no fusion buffer"),
        Field("seconds", "float", "s", "the benchmark's own time, off the training clock"),
        Field("reason", "str", "", "why the figures are empty", "None when measured"),
    ),
)

COMPILED = Record(
    "compiled",
    "run.json's `compiled`",
    "What the framework's compiler did for the training steps (train/observed.py).",
    (
        Field("compiler", "str", "", "the compiler (torch.compile's dynamo, XLA)", "uncompiled"),
        Field("graphs", "int", "", "graphs built for the steps (0: uncompiled)"),
        Field("recompiles", "int", "", "graphs built again after the first"),
        Field("recompile_reasons", "list", "", "the framework's reasons for them, the first few"),
    ),
)

GPU_STACK = Record(
    "gpu_stack",
    "run.json's `gpu_stack`",
    "The GPU stack check before the first step (scalebench/gpu_stack.py, train/devices.py check_stack): "
    "what the node's driver runs and its GPUs are, against the framework's build. The driver's version "
    "is `site`'s `driver`, the build's CUDA `versions`' `cuda`.",
    (
        Field(
            "driver_cuda",
            "str",
            "",
            "the newest CUDA the node's driver runs (nvidia-smi -q's CUDA Version)",
            "no GPU listed (reason), or nvidia-smi -q gave none (notes)",
        ),
        Field("capabilities", "object", "", "each GPU's compute capability by nvidia-smi's index", "reason"),
        Field(
            "architectures",
            "list",
            "",
            "the GPU architectures the build carries kernels for (sm_XY, compute_XY PTX); empty for a CPU build",
            "reason",
        ),
        Field(
            "notes",
            "list",
            "",
            "what fits only in part: minor-version compatibility, PTX compiled at the "
            "first run, what could not be checked",
        ),
        Field(
            "problems",
            "list",
            "",
            "what the check found against a rank of training.device auto that saw no GPU and so trained on the "
            "CPU (a rank meant for GPUs is refused on them)",
        ),
        Field(
            "reason", "str", "", "why the check did not run (training.device cpu, no GPU listed)", "None when checked"
        ),
    ),
)

SLURM = Record(
    "slurm",
    "run.json's `slurm`",
    "The SLURM job and step rank 0 ran in, from its variables (absent outside SLURM).",
    (
        Field("job_id", "str", "", "SLURM_JOB_ID"),
        Field("job_name", "str", "", "SLURM_JOB_NAME"),
        Field("nodelist", "str", "", "SLURM_JOB_NODELIST"),
        Field("partition", "str", "", "SLURM_JOB_PARTITION"),
        Field("account", "str", "", "SLURM_JOB_ACCOUNT"),
        Field("restart_count", "str", "", "SLURM_RESTART_COUNT"),
        Field("node", "str", "", "SLURMD_NODENAME: rank 0's node"),
        Field("step_id", "str", "", "SLURM_STEP_ID: the step whose energy sacct reports"),
        Field("step_nodelist", "str", "", "SLURM_STEP_NODELIST"),
        Field("step_tasks_per_node", "str", "", "SLURM_STEP_TASKS_PER_NODE"),
    ),
)

RUN = Record(
    "run",
    "run.json",
    "Where and with what a cell ran, and how it ended (train/provenance.py, the loop, launch/accounting.py, "
    "outcome.py).",
    (
        Field("framework", "str", "", "torch or tensorflow"),
        Field("backend", "str", "", "the backend"),
        Field("gpus", "int", "", "the cell's GPUs (replicas)"),
        Field("seed", "int", "", "the cell's seed"),
        Field("axes", "list", "", "the optional axes' (axis, value) pairs naming the cell"),
        Field("status", "str", "", "running, ok, diverged, oom, refused or failed"),
        Field(
            "reason",
            "str",
            "",
            "why an oom or refused cell ended so",
            "status ok or diverged",
            absent="in a cell that ended ok, diverged or failed (launch.py writes it for an oom or refused one: "
            "outcome.record)",
        ),
        Field(
            "error",
            "str",
            "",
            "the error that ended a failed, oom or refused cell",
            "no error",
            absent="in a cell that ended ok or diverged (a failed rank 0 writes it: provenance.record_failure; "
            "launch.py for an oom or refused cell: outcome.record)",
        ),
        Field("config_hash", "str", "", "the hash of the cell's settings (checkpoints refuse another)"),
        Field("git_commit", "str", "", "the code's commit, -dirty where tracked files differ", "git_commit_reason"),
        Field("git_commit_reason", "str", "", "why git_commit is empty or unsure", "None when known"),
        Field("python", "str", "", "Python's version"),
        Field("platform", "str", "", "the OS platform string"),
        Field("launch_host", "str", "", "rank 0's hostname"),
        Field("slurm", "object", "", "the SLURM job (empty outside SLURM)", part=SLURM),
        Field("argv", "list", "", "rank 0's command line"),
        Field("start", "str", "UTC", "when rank 0 started, ISO 8601 to the millisecond"),
        Field("end", "str", "UTC", "when the cell ended", "still running"),
        Field("parameters", "int", "", "the model's parameters"),
        Field("gradient_bytes", "int", "bytes", "bytes of the gradients a step reduces (float32)"),
        Field("device", "str", "", "cuda or cpu: the device the ranks trained on", old_words=(("gpu", "cuda"),)),
        Field("layout", "str", "", "the tensors' memory layout (channels_last)"),
        Field("tf32", "bool", "", "TF32 matmuls enabled", "not a GPU"),
        Field("deterministic", "bool", "", "deterministic kernels, as resolved"),
        Field("versions", "object", "", "the framework's, CUDA's, NCCL's and the backend's versions"),
        Field(
            "gpu_stack", "object", "", "the GPU stack check: the driver's CUDA, GPUs, build's kernels", part=GPU_STACK
        ),
        Field(
            "replicas", "int", "", "the model copies that trained in sync: one per GPU of the cell", was="world_size"
        ),
        Field("processes", "int", "", "processes (ranks)"),
        Field("ranks_per_node", "int", "", "processes per node"),
        Field("threads_per_rank", "int", "", "threads each rank ran with"),
        Field("gpu_required", "bool", "", "every rank had to see its own GPU"),
        Field("shared_gpu", "bool", "", "ranks shared one GPU (a functional test, not a measurement)"),
        Field("data_key", "str", "", "the prepared arrays' folder (named by the dataset settings)"),
        setting("model.width", "model_width"),
        setting("training.collective_timeout_s"),
        setting("cluster.network_interface"),
        setting("training.precision"),
        Field("data_placement", "str", "", "device or host: where the samples lived"),
        Field("data_device_bytes", "int", "bytes", "bytes of samples each device held (0 with host placement)"),
        Field("data_placement_reason", "str", "", "why the samples lived there"),
        Field("settings", "object", "", "the cell's configuration as it was started (staleness is judged on it)"),
        Field("training", "object", "", "the training settings as resolved", part=TRAINING),
        Field("hosts", "list", "", "the ranks' nodes, sorted, once each"),
        Field("nodes", "int", "", "how many nodes"),
        Field("rank_hosts", "list", "", "each rank's node, in rank order"),
        Field("devices", "list", "", "each rank's device model (its framework's name for it), in rank order"),
        Field("model_flops_per_image", "float", "FLOP", "the model's training FLOPs per image"),
        Field("cpu_binding", "str", "", "cluster.cpu_binding as applied", "cpu_binding_reason"),
        Field("cpu_bound_by", "str", "", "who bound the ranks' cores (srun, the launcher)", "cpu_binding_reason"),
        Field("cpu_binding_reason", "str", "", "why the ranks were not bound", "None when bound"),
        Field("rank_cpus", "list", "", "each rank's cores as the OS reported them"),
        Field("local_gpu_ids", "list", "", "the GPU ids a local cell held", "local_gpu_ids_reason"),
        Field("local_gpu_ids_reason", "str", "", "why there are none (SLURM, the CPU)", "None when held"),
        Field("site", "object", "", "the node's driver, GPUs, topology, libraries, network, variables", "site_reasons"),
        Field("site_reasons", "object", "", "what is absent from site, and why"),
        Field("peak_device", "str", "", "the cluster.peak_tflops entry MFU is measured against", "no entry matched"),
        Field("peak_precision", "str", "", "the precision of that peak"),
        Field("peak_tflops", "float", "TFLOP/s", "the device's peak", "no entry matched"),
        Field("collectives", "object", "", "the collective benchmark at the gradient size", part=COLLECTIVES),
        Field("compute_dtype", "str", "", "the dtype of the model's output inside a training step", "no epoch ended"),
        Field("compiled", "object", "", "what the compiler built for the steps", "no epoch ended", part=COMPILED),
        Field("setup_s", "float", "s", "start-up before the first epoch", "an oom or refused cell"),
        Field("resumed_from_epoch", "int", "", "the checkpoint's epoch a resumed run started after", "not resumed"),
        Field("epochs_completed", "int", "", "epochs trained"),
        Field("stopped_at_target", "bool", "", "training ended early at training.target_iou"),
        Field("train_gpu_hours", "float", "h", "GPUs x train_time_s: the epochs' share", was="gpu_hours"),
        Field("energy_j", "float", "J", "joules over the epochs, all ranks", "energy_reason"),
        Field("energy_source", "str", "", "nvml or rapl", "energy_reason"),
        Field("energy_reason", "str", "", "why energy_j is empty", "None when measured"),
        Field(
            "alloc_gpu_hours", "float", "h", "the allocation's GPUs x its run time (SLURM)", "alloc_gpu_hours_reason"
        ),
        Field("alloc_gpu_hours_reason", "str", "", "why alloc_gpu_hours is empty", "None when accounted"),
        # what the cell's job held (launch/accounting.py: job_wall), the figure it costs and the bill predicts
        Field(
            "job_s",
            "float",
            "s",
            "the cell's job wall: SLURM's elapsed (scontrol RunTime) in a SLURM job, else launch.py's own "
            "process from its start (before any framework's import) to the ranks' end; a resumed cell's "
            "attempts summed",
            "job_s_reason",
        ),
        Field("job_s_source", "str", "", "slurm elapsed or launch: the clock job_s was read from", "job_s_reason"),
        Field("job_attempts", "int", "", "the attempts job_s sums (more than 1: a resumed cell)", "job_s_reason"),
        Field("job_s_reason", "str", "", "why job_s is empty", "None when measured"),
        Field("step_energy_j", "float", "J", "the ranks' step's joules by sacct", "step_energy_reason"),
        Field("step_energy_source", "str", "", "sacct", "step_energy_reason"),
        Field("step_energy_plugin", "str", "", "SLURM's AcctGatherEnergyType", "none configured"),
        Field("step_energy_reason", "str", "", "why step_energy_j is empty", "None when accounted"),
    ),
)

# The records, in the order docs/records.md lists them
RECORDS = (EPOCH, RANK, FINAL, RUN, TRAINING, COLLECTIVES, COMPILED, GPU_STACK, SLURM)
