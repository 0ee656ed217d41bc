"""The step split on real CPU ranks: known delays (SCALEBENCH_FAULT, train/faults.py) are found where
they were put, the parts add up, the window of training.profile is traced, and measuring changes
nothing that is trained.

Each cell injects its delays in chosen epochs and compares them with an epoch without: epoch 1 is
the warm-up, so the comparison is epoch against epoch of the same cell on the same ranks. The
delays are large against the steps of the tiny data (0.4 s per step, about twice a step), and the
bounds generous, so a loaded machine does not decide a test (a CI machine running two cells at once
varied a rank's compute by 0.1 s per step); a split that missed the delay would be off by all of it.

Each framework's native cell has three ranks and carries every delay its test looks for, a straggler
among them: the test of one slow rank among three reads the same cell (trained once per run,
faulted_once), so the two tests cost one cell of each framework, not two.

That measuring changes nothing that is trained is read from each framework's checkpoints, in its own
session: test_step_split_torch.py and test_step_split_tensorflow.py, with the cells trained here.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import statistics
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    allreduce_counts,
    cell_settings,
    launch_cell,
    made_once,
    rank_pids,
    read_records,
    skip_unless_horovod_ran,
    start_cell,
    wait_for,
)
from scalebench import backends
from scalebench.analysis import collect
from scalebench.records import REST_TOLERANCE_S, REST_TOLERANCE_SHARE
from scalebench.timing import step_split

pytestmark = pytest.mark.integration

# per step: a late reduction, a straggler's compute. Each part is measured as its growth against an
# epoch without the delay, and on a loaded 2-core machine that epoch's compute has moved by 0.17-0.26 s
# per step (the clean-clone check of 2026-11-27 saw Horovod's rank 1 grow 0.23 s for a delay of 0.4):
# the delay is three times that noise, so every bound below, a share of the delay, stands clear of it.
DELAY_S = 0.8
LOADER_S = 0.1  # per batch
# 7 steps an epoch on each of 2 ranks (28 training pairs x 2 / 2 ranks / batch 4), 4 on each of 3; no
# checkpoint between epochs: rank 0 writing one while rank 1 starts the next epoch would hide a delay in
# that epoch's first step
FAULT_CELL = {"dataset_repeat": 2, "checkpoint_every": 0, "predictions": 0}

# The native cell of each framework: three ranks, epoch 1 the warm-up, a window traced, then an epoch
# without a delay, and one for each delay, one kind an epoch (their parts would mix): a late reduction
# with a slow loader, a slow reduction on every rank, and last a straggler (rank 1 of three computes
# DELAY_S longer), where the three-rank test had it: a critical path that took the rank of the longest
# epoch, not of the longest own work, was caught there in the last epoch and passed in a middle one.
# (fault, training overrides) for faulted_once.
NATIVE_RANKS = 3
NATIVE_CELLS = {
    # epoch 2 profiled, 3 without a delay, 4 a late reduction and a slow loader, 5 a slow network, 6 a straggler
    "torch": (
        f"slow_reduce:1:{DELAY_S}:4,slow_loader:{LOADER_S}:4,slow_comm:{DELAY_S}:5,slow_compute:1:{DELAY_S}:6",
        {"epochs": 6, "profile": {"epoch": 2, "steps": 3}},
    ),
    # epoch 1 profiled too, 2 without a delay, 3 a late reduction and a slow loader, 4 a slow network, 5 a straggler
    "tensorflow": (
        f"slow_reduce:1:{DELAY_S}:3,slow_loader:{LOADER_S}:3,slow_comm:{DELAY_S}:4,slow_compute:1:{DELAY_S}:5",
        {"epochs": 5, "profile": {"epoch": 1, "steps": 2}},
    ),
}
# (the epoch of the late reduction and slow loader, of the straggler, of the slow network, without a delay)
NATIVE_EPOCHS = {"torch": (4, 6, 5, 3), "tensorflow": (3, 5, 4, 2)}


def run_cell(
    framework: str, backend: str, out: Path, data: Path, fault: str, gpus: int = 2, **training
) -> tuple[list, dict, dict]:
    result = launch_cell(
        cell_settings(framework, backend, gpus, **{**FAULT_CELL, **training}), data, out, SCALEBENCH_FAULT=fault
    )
    if backend == "horovod":
        skip_unless_horovod_ran(result, out, framework)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return checked_records(out, gpus)


def faulted_once(tmp_path_factory: pytest.TempPathFactory, framework: str, data: Path) -> Path:
    """The folder of NATIVE_CELLS' cell of `framework`, trained with its delays as the train rule runs
    it, once per run for every test that reads it (made_once; alone, a test trains it itself)."""
    fault, training = NATIVE_CELLS[framework]
    settings = cell_settings(framework, "native", NATIVE_RANKS, **{**FAULT_CELL, **training})
    text = json.dumps({"settings": settings, "data": str(data), "fault": fault}, sort_keys=True)
    name = f"step-split-{framework}-native-g{NATIVE_RANKS}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    def make(folder: Path) -> None:
        (folder / "settings.json").write_text(text)
        result = launch_cell(settings, data, folder / "out", SCALEBENCH_FAULT=fault)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, name, make) / "out"


def checked_records(out: Path, gpus: int) -> tuple[list, dict, dict]:
    """The records of the cell in `out`: it ended ok, and its parts add up on every rank."""
    epochs, final, run = read_records(out)
    assert run["status"] == "ok"
    assert_parts_add_up(epochs, gpus)
    return epochs, final, run


def assert_parts_add_up(epochs: list[dict], ranks: int = 2) -> None:
    """Every rank of every epoch: compute + exposed communication + data wait + rest = its epoch
    time, rest at most the stated tolerance below zero, no part negative; the record's epoch time
    is the slowest rank's; the critical path adds up to it too."""
    steps = {2: 7, 3: 4}[ranks]  # 56 training pairs a pass, sharded over the ranks, batches of 4
    for epoch in epochs:
        rows = epoch["ranks"]
        assert [r["rank"] for r in rows] == list(range(ranks)) and epoch["step_split_reason"] is None
        for r in rows:
            parts = r["compute_s"] + r["comm_exposed_s"] + r["data_wait_s"] + r["rest_s"]
            assert parts == pytest.approx(r["epoch_time_s"], abs=1e-9)
            assert r["rest_s"] >= -(REST_TOLERANCE_SHARE * r["epoch_time_s"] + REST_TOLERANCE_S), r
            assert r["compute_s"] > 0 and r["comm_exposed_s"] >= 0 and r["steps"] == steps
            assert r["step_median_s"] <= r["step_p90_s"] <= r["step_max_s"]
        assert epoch["epoch_time_s"] == pytest.approx(max(r["epoch_time_s"] for r in rows))
        assert epoch["compute_s"] == pytest.approx(statistics.median(r["compute_s"] for r in rows))
        assert epoch["comm_exposed_max_s"] == pytest.approx(max(r["comm_exposed_s"] for r in rows))
        path = step_split.critical_path(epoch)
        assert sum(path[name] for name in step_split.CRITICAL_PATH) == pytest.approx(epoch["epoch_time_s"])


def per_step_growth(epochs: list[dict], rank: int, field: str, fault_epoch: int, base_epoch: int) -> float:
    """How much `field` of `rank` grew per step from the epoch without a delay to the epoch with one."""
    fault, base = epochs[fault_epoch - 1]["ranks"][rank], epochs[base_epoch - 1]["ranks"][rank]
    return (fault[field] - base[field]) / fault["steps"]


def path_growth(epochs: list[dict], name: str, fault_epoch: int, base_epoch: int) -> float:
    """How much the critical path's part `name` grew per step from the epoch without a delay."""
    fault, base = epochs[fault_epoch - 1], epochs[base_epoch - 1]
    steps = fault["ranks"][0]["steps"]
    return (step_split.critical_path(fault)[name] - step_split.critical_path(base)[name]) / steps


def assert_about(growth: float, delay: float, what: str = "the delay") -> None:
    """The split grew by about `delay`: not nothing, not double (a loaded 2-core machine has moved one
    step's compute by 0.26 s against the epoch without the delay: both bounds clear it, DELAY_S)."""
    assert 0.6 * delay <= growth <= 1.6 * delay + 0.05, f"grew {growth:.3f} s per step for {what} of {delay:.3f} s"


def assert_not_grown(growth: float, delay: float, what: str = "the delay") -> None:
    assert growth < 0.4 * delay, f"grew {growth:.3f} s per step; {what} of {delay:.3f} s belongs to another part"


def lateness_of_rank_1(epochs: list[dict], fault_epoch: int, base_epoch: int) -> float:
    """How much later rank 1 came to the reduction in each step of fault_epoch, as it measured itself:
    its compute's growth per step. At least the injected sleep, and on a loaded machine more (a sleep
    overshoots, the core is shared), which its peers waited for too: their wait is compared with this,
    not with the nominal delay. Never more than its steps grew by the epoch clock (with the margin
    assert_not_grown allows another part's noise)."""
    late = per_step_growth(epochs, 1, "compute_s", fault_epoch, base_epoch)
    clock = per_step_growth(epochs, 1, "epoch_time_s", fault_epoch, base_epoch)
    assert late >= 0.6 * DELAY_S, f"rank 1's compute grew {late:.3f} s per step for a delay of {DELAY_S} s"
    assert late <= clock + 0.4 * late, f"rank 1's compute grew {late:.3f} s per step, its steps {clock:.3f} s"
    return late


def assert_others_waited_for_rank_1(epochs: list[dict], fault_epoch: int, base_epoch: int, ranks: int = 2) -> None:
    """Rank 1 came DELAY_S late to every reduction of fault_epoch (a late reduction or a straggler's
    compute), and counted it as compute; every other rank waited for it inside its reduction
    (exposed communication) as long as rank 1 was late, its own compute unchanged; the critical path
    is rank 1's, so the lateness is imbalance there, and the communication the critical rank waited
    for did not grow (each part measured against the lateness: a part that took it grows by about
    all of it)."""
    late = lateness_of_rank_1(epochs, fault_epoch, base_epoch)
    what = "rank 1's lateness"
    for rank in set(range(ranks)) - {1}:
        assert_about(per_step_growth(epochs, rank, "comm_exposed_s", fault_epoch, base_epoch), late, what)
        assert_not_grown(per_step_growth(epochs, rank, "compute_s", fault_epoch, base_epoch), late, what)
    assert_not_grown(per_step_growth(epochs, 1, "comm_exposed_s", fault_epoch, base_epoch), late, what)
    assert step_split.critical_path(epochs[fault_epoch - 1])["critical_rank"] == 1
    assert_about(path_growth(epochs, "imbalance_s", fault_epoch, base_epoch), late, what)
    assert_not_grown(path_growth(epochs, "comm_exposed_critical_s", fault_epoch, base_epoch), late, what)


def assert_late_reduction_found(epochs: list[dict], fault_epoch: int, base_epoch: int, ranks: int = 2) -> None:
    """Rank 1 handed its gradients to the reduction DELAY_S late in every step of fault_epoch. On every
    rank alike in both frameworks: rank 1 had not finished its gradients (compute), the others waited
    for it inside their reduction (exposed communication)."""
    assert_others_waited_for_rank_1(epochs, fault_epoch, base_epoch, ranks)


def assert_slow_network_found(epochs: list[dict], fault_epoch: int, base_epoch: int, ranks: int = 2) -> None:
    """Every rank's reduction took DELAY_S longer in every step of fault_epoch (slow_comm): exposed
    communication on every rank and on the critical path, compute and imbalance unchanged."""
    for rank in range(ranks):
        assert_about(per_step_growth(epochs, rank, "comm_exposed_s", fault_epoch, base_epoch), DELAY_S)
        assert_not_grown(per_step_growth(epochs, rank, "compute_s", fault_epoch, base_epoch), DELAY_S)
    assert_about(path_growth(epochs, "comm_exposed_critical_s", fault_epoch, base_epoch), DELAY_S)
    assert_not_grown(path_growth(epochs, "imbalance_s", fault_epoch, base_epoch), DELAY_S)


def assert_straggler_found(epochs: list[dict], run: dict, fault_epoch: int, base_epoch: int, ranks: int = 2) -> None:
    """Rank 1 computed DELAY_S longer in every step of fault_epoch: the record names it and its host;
    the others waited for it inside their reduction; the critical path calls it imbalance."""
    epoch = epochs[fault_epoch - 1]
    assert (epoch["straggler_rank"], epoch["straggler_host"]) == (1, run["rank_hosts"][1])
    assert epoch["compute_spread"] > epochs[base_epoch - 1]["compute_spread"]
    assert_others_waited_for_rank_1(epochs, fault_epoch, base_epoch, ranks)
    assert_not_grown(path_growth(epochs, "compute_typical_s", fault_epoch, base_epoch), DELAY_S)


def assert_slow_loader_found(epochs: list[dict], fault_epoch: int, base_epoch: int, ranks: int = 2) -> None:
    for rank in range(ranks):
        assert_about(per_step_growth(epochs, rank, "data_wait_s", fault_epoch, base_epoch), LOADER_S)
    assert_about(path_growth(epochs, "data_wait_critical_s", fault_epoch, base_epoch), LOADER_S)


def row_of(out: Path, framework: str, backend: str, gpus: int = 2) -> dict:
    row, _ = collect.read_cell(out, {"framework": framework, "backend": backend, "gpus": gpus, "seed": 1})
    return row


def every_delay_found(tmp_path_factory: pytest.TempPathFactory, framework: str, data: Path) -> tuple[Path, list, dict]:
    """The folder and records of NATIVE_CELLS' cell of `framework` (faulted_once), each of its delays
    found where it was put, on every one of its ranks."""
    out = faulted_once(tmp_path_factory, framework, data)
    epochs, _, run = checked_records(out, NATIVE_RANKS)
    late, straggler, network, base = NATIVE_EPOCHS[framework]
    assert_late_reduction_found(epochs, late, base, NATIVE_RANKS)
    assert_slow_loader_found(epochs, late, base, NATIVE_RANKS)
    assert_straggler_found(epochs, run, straggler, base, NATIVE_RANKS)
    assert_slow_network_found(epochs, network, base, NATIVE_RANKS)
    return out, epochs, run


def test_ddp_finds_a_late_reduction_a_slow_loader_a_straggler_and_a_slow_network_and_traces_a_window(
    prepared_data, tmp_path_factory
):
    out, epochs, run = every_delay_found(tmp_path_factory, "torch", prepared_data)
    # DDP's timed hook: the allreduces' own time, and how much of it the backward hid
    for epoch in epochs:
        for rank in epoch["ranks"]:
            assert 0 < rank["comm_total_s"] and 0 <= rank["comm_overlap"] <= 1
    # the straggler's rank 0 waited for it in DDP's buffer broadcast and its reduction: exposed, not compute
    _, straggler, _, base = NATIVE_EPOCHS["torch"]
    assert per_step_growth(epochs, 0, "comm_exposed_s", straggler, base) > 0.6 * DELAY_S
    # the profile window: epoch 2's first steps on every rank, Perfetto/TensorBoard's trace format
    assert [e["profiled"] for e in epochs] == [False, True, False, False, False, False]
    assert (epochs[1]["profile_trace"], epochs[1]["profile_reason"]) == ("profile", None)
    for rank in range(NATIVE_RANKS):
        trace = json.loads((out / "profile" / f"rank{rank}.pt.trace.json").read_text())
        names = {event.get("name") for event in trace["traceEvents"]}
        assert "gloo:all_reduce" in names and "aten::convolution_backward" in names
    # runs.csv: the steady figures leave the profiled epoch out, the split's columns are there
    row = row_of(out, "torch", "native", NATIVE_RANKS)
    assert row["steady_epoch_s"] == pytest.approx(statistics.median(e["epoch_time_s"] for e in epochs[2:]))
    assert row["profiled_epoch"] == 2 and row["profile_trace"] == "profile"
    medians = [e["comm_exposed_s"] for e in epochs[2:]]
    assert row["comm_exposed_median_s"] == pytest.approx(statistics.median(medians))
    assert sum(row[name] for name in step_split.CRITICAL_PATH) == pytest.approx(row["steady_epoch_s"])
    assert row["comm_share"] == pytest.approx(row["comm_exposed_critical_s"] / row["steady_epoch_s"])
    assert row["step_split_reason"] is None and row["straggler_host"] == run["rank_hosts"][row["straggler_rank"]]


@pytest.mark.parametrize("backend", ["fsdp", "horovod"])
def test_fsdp_and_horovod_find_a_late_reduction(backend, prepared_data, tmp_path):
    profile = {"epoch": 1, "steps": 2} if backend == "horovod" else None
    if profile:  # rank 1's trace cannot be written (a folder that is not empty stands where its file goes)
        (tmp_path / "profile" / "rank1.pt.trace.json" / "blocker").mkdir(parents=True)
    fault = f"slow_reduce:1:{DELAY_S}:3,slow_comm:{DELAY_S}:4"
    epochs, _, _ = run_cell("torch", backend, tmp_path, prepared_data, fault, epochs=4, profile=profile)
    assert_late_reduction_found(epochs, 3, 2)
    assert_slow_network_found(epochs, 4, 2)
    if backend == "fsdp":  # its collectives block a CPU rank: all of their time is exposed
        assert all(r["comm_total_s"] > 0 and r["comm_overlap"] < 0.5 for e in epochs for r in e["ranks"])
    else:
        assert all(e["comm_total_s"] is None and "timeline" in e["comm_total_reason"] for e in epochs)
        # the cell kept its figures; the record names the trace that is missing and why
        assert epochs[0]["profiled"] and epochs[0]["profile_trace"] == "profile"  # rank 0's and the timeline
        assert "rank 1: the trace could not be written" in epochs[0]["profile_reason"]
        assert "rank 0" not in epochs[0]["profile_reason"]
        assert (tmp_path / "profile" / "rank0.pt.trace.json").is_file()
        assert sum(allreduce_counts(tmp_path / "profile" / "horovod_timeline.json").values()) > 0


def test_multiworker_mirrored_finds_a_late_reduction_a_slow_loader_a_straggler_and_a_slow_network(
    prepared_data, tmp_path_factory
):
    out, epochs, run = every_delay_found(tmp_path_factory, "tensorflow", prepared_data)
    assert all(e["comm_total_s"] is None and "TensorFlow's collectives" in e["comm_total_reason"] for e in epochs)
    # TensorFlow's profiler, for TensorBoard's profile plugin; rank 0 alone in a MultiWorkerMirrored job
    # (two workers tracing at once crash one: tf/native.py), which the record says of each other rank
    assert list((out / "profile" / "rank0" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert epochs[0]["profile_trace"] == "profile"
    for rank in range(1, NATIVE_RANKS):
        assert not (out / "profile" / f"rank{rank}").exists()
        assert f"rank {rank}: not traced: TensorFlow's profiler crashes" in epochs[0]["profile_reason"]
    assert epochs[0]["profile_reason"].startswith("rank 1: not traced: TensorFlow's profiler crashes")


def test_tensorflow_horovod_finds_a_late_reduction_and_keeps_a_cell_whose_trace_cannot_start(prepared_data, tmp_path):
    (tmp_path / "profile").write_text("a file where the trace's folder goes")
    epochs, final, _ = run_cell(
        "tensorflow",
        "horovod",
        tmp_path,
        prepared_data,
        f"slow_reduce:1:{DELAY_S}:3,slow_comm:{DELAY_S}:4",
        epochs=4,
        profile={"epoch": 1, "steps": 2},
    )
    assert_late_reduction_found(epochs, 3, 2)
    assert_slow_network_found(epochs, 4, 2)
    assert final["status"] == "ok" and epochs[0]["profiled"] and epochs[0]["profile_trace"] is None
    assert all(f"rank {r}: the profiler could not start" in epochs[0]["profile_reason"] for r in (0, 1))
    row = row_of(tmp_path, "tensorflow", "horovod")
    assert row["status"] == "ok" and "could not start" in row["profile_reason"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_one_slow_rank_among_three_is_imbalance_on_every_rank_not_communication(
    framework, prepared_data, tmp_path_factory
):
    """The loss waterfall's premise, on real ranks of both frameworks: rank 1 of three computes DELAY_S
    longer in every step of one epoch; ranks 0 and 2 wait for it inside their reductions; the critical
    path (typical compute, imbalance, exposed communication) gives the delay to imbalance. Read from
    each framework's native cell of three ranks (NATIVE_CELLS), which the test of its every delay reads too."""
    epochs, _, run = checked_records(faulted_once(tmp_path_factory, framework, prepared_data), NATIVE_RANKS)
    _, straggler, _, base = NATIVE_EPOCHS[framework]
    assert_straggler_found(epochs, run, straggler, base, ranks=3)


def one_process_cell(framework: str, backend: str, gpus: int, data: Path, out: Path, fault: str) -> list[dict]:
    """The epochs of a cell of one process (mirrored, dp: one record of the split, rank 0's), whose
    parts add up as every rank's do."""
    settings = cell_settings(framework, backend, gpus, epochs=4, **FAULT_CELL)
    result = launch_cell(settings, data, out, SCALEBENCH_FAULT=fault)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    epochs, _, run = read_records(out)
    assert run["status"] == "ok" and run["processes"] == 1 and run["replicas"] == gpus
    for epoch in epochs:
        (rank,) = epoch["ranks"]
        parts = rank["compute_s"] + rank["comm_exposed_s"] + rank["data_wait_s"] + rank["rest_s"]
        assert parts == pytest.approx(rank["epoch_time_s"], abs=1e-9) and epoch["step_split_reason"] is None
    return epochs


def test_mirrored_on_two_logical_cpu_devices_finds_a_late_reduction_and_a_slow_loader(prepared_data, tmp_path):
    # one process, two replicas (logical CPU devices): its reduction between the replicas is an op of
    # the step's graph, between the marks b and c; a delay there (slow_comm, in each replica) is
    # exposed communication, and the loader's delay is the process's data wait
    fault = f"slow_comm:{DELAY_S}:3,slow_loader:{LOADER_S}:3"
    epochs = one_process_cell("tensorflow", "mirrored", 2, prepared_data, tmp_path, fault)
    assert read_records(tmp_path)[2]["training"]["tf_replica_devices"] == "logical CPU"
    assert epochs[0]["ranks"][0]["steps"] == 7  # 56 pairs, 4 per replica, 2 replicas
    assert_about(per_step_growth(epochs, 0, "comm_exposed_s", 3, 2), DELAY_S)
    assert_about(per_step_growth(epochs, 0, "data_wait_s", 3, 2), LOADER_S)
    assert per_step_growth(epochs, 0, "comm_exposed_s", 4, 2) < 0.5 * DELAY_S  # epoch 4 without: back
    assert all(e["comm_total_s"] is None and "TensorFlow's collectives" in e["comm_total_reason"] for e in epochs)


def test_dataparallel_on_one_cpu_device_finds_a_straggling_step_and_has_nothing_to_reduce(prepared_data, tmp_path):
    # On the CPU nn.DataParallel drives one device: no replicas, no reduction (its multi-device path,
    # where the sum of the replicas' gradients is the exposed part, needs GPUs: tests/gpu). What it
    # measures here: the step's compute (a slow_compute delay lands there) and the loader's wait.
    fault = f"slow_compute:0:{DELAY_S}:3,slow_loader:{LOADER_S}:3"
    epochs = one_process_cell("torch", "dp", 1, prepared_data, tmp_path, fault)
    assert epochs[0]["ranks"][0]["steps"] == 14  # 56 pairs, 4 a batch
    assert_about(per_step_growth(epochs, 0, "compute_s", 3, 2), DELAY_S)
    assert_about(per_step_growth(epochs, 0, "data_wait_s", 3, 2), LOADER_S)
    assert all(e["comm_exposed_s"] < 0.05 * e["epoch_time_s"] for e in epochs)
    assert all("on one device there are none" in e["comm_total_reason"] for e in epochs)


def stalled_cell(settings: dict, data: Path, out: Path) -> None:
    """Train epochs 1 and 2 of `settings` and stop at the start of epoch 3, after epoch 2's checkpoint."""
    process = start_cell(settings, data, out, SCALEBENCH_FAULT="stall:3")
    lines: list[str] = []
    threading.Thread(target=lambda: [lines.append(line) for line in process.stdout], daemon=True).start()
    # every rank's stall line: rank 0 stalls only once it has written epoch 2's checkpoint, while the
    # others go on at once (a stop on the first line could keep epoch 1's)
    cell = settings["cell"]
    ranks = backends.processes(cell["framework"], cell["backend"], cell["gpus"])
    # counted, not lines: the ranks share one pipe, and two lines written at once can share a line
    every_rank_stalled = lambda: "".join(lines).count("stalling at epoch 3") == ranks  # noqa: E731
    try:
        assert wait_for(every_rank_stalled, 300), "".join(lines)[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)  # as SLURM at a time limit: launch.py stops its ranks
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            for pid in rank_pids(out):  # never leave a stalled rank behind
                os.kill(pid, signal.SIGKILL)
    # the SIGTERM stopped rank 0 itself, which said so: not its launcher's SIGKILL after a grace time
    # (MultiWorkerMirrored's coordination service once swallowed SIGTERM, leaving "running")
    run = json.loads((out / "run.json").read_text())
    assert (run["status"], run["error"]) == ("failed", "SystemExit: 143"), run


def assert_measuring_the_split_changes_nothing_that_is_trained(
    framework: str, backend: str, data: Path, folder: Path, checkpoint_tensors
) -> None:
    """Two cells stalled after epoch 2's checkpoint, one measuring the split and one not, trained the
    same: the same records and, read by `checkpoint_tensors(outs)` (each framework's test reads its
    own checkpoints, in its own session: test_step_split_torch.py, test_step_split_tensorflow.py),
    the same model and optimizer state to the bit."""
    outs = [folder / f"split-{split}" for split in (True, False)]
    for split, out in zip((True, False), outs):
        stalled_cell(cell_settings(framework, backend, 2, epochs=3, eval_every=1, step_split=split), data, out)
    measured, unmeasured = (
        [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] for out in outs
    )
    tensors, reference = checkpoint_tensors(outs)
    assert [e["epoch"] for e in measured] == [1, 2] == [e["epoch"] for e in unmeasured]
    assert [(e["loss"], e["val_loss"], e["val_iou"]) for e in measured] == [
        (e["loss"], e["val_loss"], e["val_iou"]) for e in unmeasured
    ]
    assert sorted(tensors) == sorted(reference) and len(tensors) > 10
    for name, value in reference.items():
        assert np.array_equal(tensors[name], value), name
    # the split was measured in one and not the other
    assert all(e["comm_exposed_s"] is not None for e in measured)
    assert all(e["compute_s"] is None and e["step_split_reason"] == "training.step_split is off" for e in unmeasured)
