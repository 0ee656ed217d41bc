"""The step split's bookkeeping (train/step_timing.py), PyTorch's marks in the order the backends'
own callbacks run (train/torch/step_timing.py), and the test faults that the split must find."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
from scalebench.records import STEP_SPLIT_FIELDS
from scalebench.train import faults, step_timing
from scalebench.train.step_timing import RANK_FIELDS, StepTimes
from scalebench.train.torch import step_timing as torch_marks

ENVIRONMENT = "torch"


def gathered(rows: list[np.ndarray]) -> np.ndarray:
    """What the loop's one allreduce of every rank's placed row gives each rank."""
    return sum(step_timing.placed(row, rank, len(rows)) for rank, row in enumerate(rows))


def test_a_ranks_parts_add_up_to_its_epoch_and_the_record_summarises_the_ranks():
    fast = step_timing.rank_row(2.0, 0.2, StepTimes([0.3, 0.4, 0.5], [0.1, 0.1, 0.2], 0.8))
    slow = step_timing.rank_row(2.1, 0.1, StepTimes([0.6, 0.6, 0.7], [0.0, 0.05, 0.05]))
    figures = dict(zip(RANK_FIELDS, fast, strict=True))
    assert figures["compute_s"] == pytest.approx(0.8) and figures["comm_exposed_s"] == pytest.approx(0.4)
    assert figures["rest_s"] == pytest.approx(2.0 - 0.2 - 1.2)  # the loop's time outside steps and waits
    parts = figures["compute_s"] + figures["comm_exposed_s"] + figures["data_wait_s"] + figures["rest_s"]
    assert parts == pytest.approx(figures["epoch_time_s"])
    assert figures["comm_overlap"] == pytest.approx(0.5)  # 0.4 s of 0.8 s in flight were exposed
    assert (figures["step_median_s"], figures["step_max_s"]) == (0.4, 0.5)
    record = step_timing.epoch_fields(gathered([fast, slow]), ["n1", "n2"], "no timed collectives")
    assert (record["straggler_rank"], record["straggler_host"]) == (1, "n2")  # the largest compute: 1.8 s
    assert record["compute_s"] == pytest.approx((0.8 + 1.8) / 2) and record["compute_max_s"] == pytest.approx(1.8)
    assert record["compute_spread"] == pytest.approx((1.8 - 0.8) / 1.3)
    assert record["comm_exposed_max_s"] == pytest.approx(0.4) and record["step_max_s"] == pytest.approx(0.7)
    # rank 1 measured no total: the median is over the ranks that did
    assert record["comm_total_s"] == pytest.approx(0.8) and record["ranks"][1]["comm_total_s"] is None
    assert [r["host"] for r in record["ranks"]] == ["n1", "n2"] and record["ranks"][0]["steps"] == 3
    assert set(record) | {"profiled", "profile_trace", "profile_reason"} == set(STEP_SPLIT_FIELDS)


def test_an_epoch_without_the_split_is_empty_with_its_reason_never_zero():
    record = step_timing.unmeasured("training.step_split is off")
    assert record["step_split_reason"] == "training.step_split is off"
    assert all(record[name] is None for name in ("compute_s", "comm_exposed_s", "rest_s", "straggler_rank"))
    no_total = step_timing.epoch_fields(
        gathered([step_timing.rank_row(1.0, 0.0, StepTimes([0.5], [0.1], None, "why"))]), ["n1"], "why"
    )
    assert (
        no_total["comm_total_s"] is None and no_total["comm_overlap"] is None and no_total["comm_total_reason"] == "why"
    )


def test_a_rest_below_zero_beyond_the_tolerance_is_named():
    assert step_timing.rest_problem({"rank": 0, "epoch_time_s": 10.0, "rest_s": -0.05}) == ""
    assert "rank 3: its measured parts exceed its epoch time by 0.5000 s" in step_timing.rest_problem(
        {"rank": 3, "epoch_time_s": 10.0, "rest_s": -0.5}
    )


def test_communication_in_flight_counts_once_where_collectives_overlap():
    spans = [(0.0, 1.0), (0.5, 1.5), (3.0, 4.0)]
    assert torch_marks.covered(spans, 0.0, 10.0) == pytest.approx(2.5)
    assert torch_marks.covered(spans, 1.0, 3.5) == pytest.approx(1.0)


def test_the_faults_delay_the_rank_and_epoch_they_name():
    plan = faults.FaultPlan.parse("slow_reduce:1:0.2:3,slow_loader:0.1:3,slow_compute:0:0.5:4")
    assert plan.delays(1, 2) == faults.Delays(reduce_s=0.2, loader_s=0.1)  # 0-based epoch 2 is epoch 3
    assert plan.delays(0, 2) == faults.Delays(loader_s=0.1)
    assert plan.delays(0, 3) == faults.Delays(compute_s=0.5) and plan.delays(1, 0) == faults.Delays()
    assert plan.injects("slow_reduce") and not plan.injects("stall")
    assert list(faults.delayed(iter([1, 2]), 0.0)) == [1, 2]
    hiding = faults.FaultPlan.parse("hide_checkpoint:1,slow_loader:0.1:2")
    assert hiding.checkpoint_folder(1, __import__("pathlib").Path("out")).name == ".hidden-checkpoint"


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def late_future(seconds: float, value: torch.Tensor) -> torch.futures.Future:
    future = torch.futures.Future()
    threading.Timer(seconds, lambda: future.set_result(value)).start()
    return future


def marked_step(model: torch.nn.Module, marks: torch_marks.StepMarks) -> None:
    """One step as the framework marks it: a, b from the callback the loss's hook queues, c, d."""
    marks.begin()
    loss = model(torch.ones(2, 8)).sum()
    torch_marks.at_compute_end(loss, marks.computed)
    loss.backward()
    marks.reduced()
    marks.end()


def test_the_compute_end_callback_runs_before_ddp_waits_for_its_reduction(one_rank_group):
    # DDP's reducer queues its finalize, which waits for every bucket's reduction, when the last
    # bucket is ready: after the loss's hook queued ours. A reduction that completes 0.3 s late is
    # then exposed communication (c - b); were our callback after DDP's wait, it would be ~0. The
    # 0.3 s count from the bucket's hook, a moment before b (a loaded machine widened it to 12 ms):
    # the bound is the delay less a margin that no scheduling can eat, and far above ~0.
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    model.register_comm_hook(None, lambda state, bucket: late_future(0.3, bucket.buffer()))
    marks = torch_marks.StepMarks(torch.device("cpu"), "not timed here")
    marked_step(model, marks)
    (exposed,) = marks.times().exposed_s
    assert exposed >= 0.2 and marks.times().comm_total_s is None


def test_the_compute_end_callback_runs_before_fsdps_final_reduce_scatters(one_rank_group, monkeypatch):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    final = FSDPState._root_post_backward_final_callback

    def late_final(self):  # FSDP2's root callback: the last reduce-scatters and their wait
        time.sleep(0.3)
        final(self)

    monkeypatch.setattr(FSDPState, "_root_post_backward_final_callback", late_final)
    model = fully_shard(torch.nn.Linear(8, 4), mesh=init_device_mesh("cpu", (1,)))
    marks = torch_marks.StepMarks(torch.device("cpu"), "not timed here")
    marked_step(model, marks)
    assert marks.times().exposed_s[0] >= 0.3


def test_ddps_timed_hook_reduces_as_ddp_does_and_notes_each_allreduce(one_rank_group):
    torch.manual_seed(0)
    plain = torch.nn.Linear(8, 4)
    timed = torch.nn.Linear(8, 4)
    timed.load_state_dict(plain.state_dict())
    marks = torch_marks.StepMarks(torch.device("cpu"), "")
    reference = torch.nn.parallel.DistributedDataParallel(plain)
    measured = torch.nn.parallel.DistributedDataParallel(timed)
    measured.register_comm_hook(None, torch_marks.timed_comm_hook(marks, None, 1))
    for model in (reference, measured):
        model(torch.arange(16.0).reshape(2, 8)).pow(2).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), timed.parameters(), strict=True))
    assert len(marks.comm.spans) == 1 and all(end >= start for start, end, _ in marks.comm.spans)
    assert not math.isnan(marks.comm.spans[0][1])
