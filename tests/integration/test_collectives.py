"""The collective benchmark on real ranks (Gloo on this machine's CPU), through launch.py as the
train rule runs a cell: each backend's own library, the table and run.json's summary, the budget,
and a benchmark that fails while the cell trains on. Every multi-rank cell runs the benchmark before
its first epoch: the tests that read what it measured read test_data_placement's device cells, and
the one-rank test test_compiled_steps' eager cell, the budget of nothing test_data_placement's DDP host
cell (test_network_interface's too), trained once per run (paired_cells.py)."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
from pathlib import Path

import pytest
from conftest import SCRIPTS, cell_settings, framework_python, launch_cell, read_records, tool_env
from paired_cells import COLLECTIVES, SCHEDULE, placed, trained_once, unmeasured_over_loopback
from scalebench.records.tables import CELL_COLLECTIVES
from scalebench.train import collectives

pytestmark = pytest.mark.integration


def table(out: Path) -> list[dict]:
    with open(out / CELL_COLLECTIVES.name) as handle:
        return list(csv.DictReader(handle))


def number(text: str) -> float | None:
    return float(text) if text else None


def shared(tmp_path_factory, data: Path, settings: dict) -> tuple[dict, Path]:
    """(run.json, folder) of the cell of `settings`, trained once per run for the tests that read it."""
    out = trained_once(tmp_path_factory, settings, data)
    epochs, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok", run
    return run, out


def assert_measured(rows: list[dict], op: str, ranks: int) -> list[dict]:
    """Rows of `op` that were measured: sane positive numbers, nccl-tests' bus factor from the stored values."""
    measured = [row for row in rows if row["op"] == op and row["latency_us"]]
    assert measured, rows
    for row in measured:
        latency, algbw, busbw = number(row["latency_us"]), number(row["algbw_gbps"]), number(row["busbw_gbps"])
        assert latency > 0 and algbw > 0 and int(row["iterations"]) >= 1 and row["reason"] == ""
        assert number(row["latency_min_us"]) <= latency <= number(row["latency_max_us"])
        assert algbw == pytest.approx(int(row["bytes"]) / (latency / 1e6) / 1e9, rel=1e-6)
        assert busbw == pytest.approx(algbw * collectives.bus_factor(op, ranks), rel=1e-9)
        assert int(row["ranks"]) == ranks and row["dtype"] == "float32"
    return measured


def test_a_ddp_cell_measures_gloos_all_reduce_at_the_gradient_size_before_training(prepared_data, tmp_path_factory):
    run, out = shared(tmp_path_factory, prepared_data, placed("torch", "native", 2, "device"))
    rows = table(out)
    measured = assert_measured(rows, "all_reduce", 2)
    assert {row["library"] for row in rows} == {"torch.distributed gloo"}
    for row in measured:  # all-reduce: busbw = algbw x 2(n-1)/n, 1 on two ranks
        assert number(row["busbw_gbps"]) == pytest.approx(number(row["algbw_gbps"]))
    # the gradients first (the model's float32 bytes, whole elements over the ranks), then DDP's bucket
    gradient = next(row for row in rows if row["size"] == "gradient")
    assert 0 <= int(gradient["bytes"]) - run["gradient_bytes"] < 4 * 2 and gradient["latency_us"]
    assert run["gradient_bytes"] == 4 * run["parameters"]
    bucket = next(row for row in rows if row["size"] == "bucket")
    assert int(bucket["bytes"]) == run["collectives"]["fusion_bytes"] == 25 * 2**20  # DDP's bucket_cap_mb
    summary = run["collectives"]
    assert summary["latency_us"] == pytest.approx(number(gradient["latency_us"]))
    assert summary["busbw_gbps"] == pytest.approx(number(gradient["busbw_gbps"]))
    assert summary["reason"] is None and summary["library"] == "torch.distributed gloo"
    # bounded by the budget (1.5 s here): the bucket (25 MiB) or the largest sweep sizes did not fit, and say so
    skipped = [row for row in rows if not row["latency_us"]]
    assert all("budget" in row["reason"] for row in skipped)
    assert summary["seconds"] < 30  # a generous bound: the budget stops it, whatever the machine


def test_fsdp_measures_reduce_scatter_and_all_gather_beside_all_reduce(prepared_data, tmp_path_factory):
    _, out = shared(tmp_path_factory, prepared_data, placed("torch", "fsdp", 2, "device"))
    rows = table(out)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for row in assert_measured(rows, op, 2)[:1]:
            if op != "all_reduce":  # (n-1)/n: half the algorithm bandwidth on two ranks
                assert number(row["busbw_gbps"]) == pytest.approx(number(row["algbw_gbps"]) / 2)
    assert {row["size"] for row in rows if row["op"] == "reduce_scatter"} == {"gradient", "bucket", "sweep"}


@pytest.mark.parametrize(
    ("framework", "backend", "library"),
    [
        ("torch", "horovod", "horovod gloo"),
        ("tensorflow", "native", "tf.distribute MultiWorkerMirroredStrategy RING"),
        ("tensorflow", "horovod", "horovod gloo"),
        ("tensorflow", "mirrored", "tf.distribute MirroredStrategy local"),
    ],
)
def test_every_backend_measures_through_its_own_library(prepared_data, tmp_path_factory, framework, backend, library):
    run, out = shared(tmp_path_factory, prepared_data, placed(framework, backend, 2, "device"))
    rows = table(out)
    assert_measured(rows, "all_reduce", 2)
    assert {row["library"] for row in rows} == {library}
    assert run["collectives"]["library"] == library and run["collectives"]["gradient_bytes"]


def test_a_budget_of_nothing_records_every_size_as_not_measured_with_the_reason(prepared_data, tmp_path_factory):
    # test_data_placement's DDP host cell, which test_network_interface reads too (over the loopback interface)
    run, out = shared(tmp_path_factory, prepared_data, unmeasured_over_loopback())
    assert run["training"]["collectives"]["budget_s"] == 0
    rows = table(out)
    assert rows and all(not row["latency_us"] and not row["busbw_gbps"] for row in rows)
    assert all("budget" in row["reason"] and "budget_s = 0" in row["reason"] for row in rows)
    assert run["collectives"]["latency_us"] is None and "budget" in run["collectives"]["reason"]


def test_a_benchmark_that_fails_leaves_the_cell_training_with_its_figures_empty(prepared_data, tmp_path):
    settings = cell_settings("torch", "native", 2, epochs=2, checkpoint_every=0, predictions=0, collectives=COLLECTIVES)
    # rank 1 cannot prepare the first all-reduce; both ranks agree, and train on
    result = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT="collectives_fail:1")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    epochs, final, run = read_records(tmp_path)
    assert final["status"] == "ok" and len(epochs) == 2 and final["iou"] is not None
    rows = table(tmp_path)
    assert all(not row["latency_us"] for row in rows)
    assert "failed on another rank" in rows[0]["reason"]  # rank 0 writes the table
    assert run["collectives"]["busbw_gbps"] is None and "failed" in run["collectives"]["reason"]


def test_a_one_gpu_cell_has_no_table_and_says_why(prepared_data, tmp_path_factory):
    # tiny_config asks every cell for the benchmark: a one-rank cell has nothing to measure it on
    run, out = shared(tmp_path_factory, prepared_data, cell_settings("torch", "native", 1, **SCHEDULE))
    assert run["training"]["collectives"]["budget_s"] > 0
    assert not (out / CELL_COLLECTIVES.name).exists()
    assert run["collectives"]["reason"] == "one replica: nothing to exchange"
    assert json.loads((out / "run.json").read_text())["collectives"]["latency_us"] is None


OUTSIDE = """
import json, statistics, time, sys
import numpy as np
import torch, torch.distributed as dist
from scalebench.settings import CollectiveSettings
from scalebench.train import collectives
from scalebench.train.torch.collectives import process_group

dist.init_process_group("gloo")
ranks, rank = dist.get_world_size(), dist.get_rank()
bench = process_group(torch.device("cpu"), ("all_reduce", "reduce_scatter", "all_gather"), None, "")
outside = {}  # (op, elements) -> this rank's own time of each run of the library's operation

def timed_outside(op, prepare):
    def prepared(elements):
        run = prepare(elements)
        def run_and_time():
            started = time.perf_counter()
            run()
            outside.setdefault(f"{op}:{elements}", []).append(time.perf_counter() - started)
        return run_and_time
    return prepared

bench.ops = {op: timed_outside(op, prepare) for op, prepare in bench.ops.items()}
reduce_max = lambda values: (lambda t: (dist.all_reduce(t, op=dist.ReduceOp.MAX), t.numpy())[1])(torch.from_numpy(values.copy()))
settings = CollectiveSettings(budget_s=float(sys.argv[1]), max_bytes=2**16, iterations=5, warmup=0)
result = collectives.measure(bench, settings, ranks, rank, 40_000, reduce_max)
slowest = {}
for key, times in sorted(outside.items()):  # each iteration's slowest rank, as the benchmark defines it
    slowest[key] = reduce_max(np.array(times, dtype=np.float64)).tolist()
if rank == 0:
    print(json.dumps({"rows": result.rows, "outside": slowest}))
dist.destroy_process_group()
"""


def test_bus_bandwidth_at_four_ranks_follows_nccl_tests_from_a_timing_taken_outside_the_module(tmp_path):
    # At 4 ranks all-reduce's bus factor is 2(n-1)/n = 1.5 and reduce-scatter's and all-gather's (n-1)/n
    # = 0.75 (at 2 ranks they are 1 and 0.5, which a factor of 1 or a wrong n could pass). The test times
    # every run of Gloo's operation itself, inside the benchmark's own window (so the benchmark's
    # latency can only be longer, by the call's overhead), and applies the factors written out here.
    script = tmp_path / "outside.py"
    script.write_text(OUTSIDE)
    # torchrun in torch's environment, as the local template starts it (torch.distributed.run)
    torchrun = [framework_python("torch"), "-m", "torch.distributed.run"]
    command = [*torchrun, "--standalone", "--nproc-per-node=4", str(script), "3"]
    env = tool_env(OMP_NUM_THREADS="1", PYTHONPATH=str(SCRIPTS))
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    factors = {"all_reduce": 2 * 3 / 4, "reduce_scatter": 3 / 4, "all_gather": 3 / 4}
    measured = [row for row in found["rows"] if row["latency_us"] is not None]
    assert {row["op"] for row in measured} == set(factors), found["rows"]
    for row in measured:
        outside = sorted(found["outside"][f"{row['op']}:{row['bytes'] // 4}"])
        assert row["ranks"] == 4 and row["iterations"] == len(outside)
        latency_s = row["latency_us"] / 1e6
        assert statistics.median(outside) <= latency_s <= 2 * statistics.median(outside) + 0.02, (row, outside)
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / latency_s / 1e9, rel=1e-9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factors[row["op"]], rel=1e-9)
        # and against the outside timing: the bandwidth it allows, with the same factor
        outside_busbw = row["bytes"] / statistics.median(outside) / 1e9 * factors[row["op"]]
        assert row["busbw_gbps"] <= outside_busbw * (1 + 1e-9)  # never more than the outside timing allows
