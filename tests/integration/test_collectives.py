"""The collective benchmark on real ranks (Gloo on this machine's CPU), through launch.py as the
train rule runs a cell: each backend's own library, the table and run.json's summary, the budget,
and a benchmark that fails while the cell trains on."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import cell_settings, launch_cell, read_records
from scalebench.collective_table import TABLE
from scalebench.train import collectives

pytestmark = pytest.mark.integration

BUDGET = {"budget_s": 1.0, "max_bytes": 2**20, "iterations": 3, "warmup": 1}


def table(out: Path) -> list[dict]:
    with open(out / TABLE) as handle:
        return list(csv.DictReader(handle))


def number(text: str) -> float | None:
    return float(text) if text else None


def trained(framework: str, backend: str, data: Path, out: Path, gpus: int = 2, **training) -> dict:
    training = {"epochs": 1, "checkpoint_every": 0, "predictions": 0, "collectives": BUDGET, **training}
    settings = cell_settings(framework, "native", gpus, **training)
    settings["cell"]["backend"] = backend
    result = launch_cell(settings, data, out)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    epochs, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok", run
    return run


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


def test_a_ddp_cell_measures_gloos_all_reduce_at_the_gradient_size_before_training(prepared_data, tmp_path):
    run = trained("torch", "native", prepared_data, tmp_path)
    rows = table(tmp_path)
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
    # bounded by the budget (1 s here): the bucket (25 MiB) or the largest sweep sizes did not fit, and say so
    skipped = [row for row in rows if not row["latency_us"]]
    assert all("budget" in row["reason"] for row in skipped)
    assert summary["seconds"] < 30  # a generous bound: the budget stops it, whatever the machine


def test_fsdp_measures_reduce_scatter_and_all_gather_beside_all_reduce(prepared_data, tmp_path):
    trained("torch", "fsdp", prepared_data, tmp_path, collectives={**BUDGET, "budget_s": 1.5})
    rows = table(tmp_path)
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
def test_every_backend_measures_through_its_own_library(prepared_data, tmp_path, framework, backend, library):
    run = trained(framework, backend, prepared_data, tmp_path)
    rows = table(tmp_path)
    assert_measured(rows, "all_reduce", 2)
    assert {row["library"] for row in rows} == {library}
    assert run["collectives"]["library"] == library and run["collectives"]["gradient_bytes"]


def test_a_budget_of_nothing_records_every_size_as_not_measured_with_the_reason(prepared_data, tmp_path):
    run = trained("torch", "native", prepared_data, tmp_path, collectives={**BUDGET, "budget_s": 0})
    rows = table(tmp_path)
    assert rows and all(not row["latency_us"] and not row["busbw_gbps"] for row in rows)
    assert all("budget" in row["reason"] and "budget_s = 0" in row["reason"] for row in rows)
    assert run["collectives"]["latency_us"] is None and "budget" in run["collectives"]["reason"]


def test_a_benchmark_that_fails_leaves_the_cell_training_with_its_figures_empty(prepared_data, tmp_path):
    settings = cell_settings("torch", "native", 2, epochs=2, checkpoint_every=0, predictions=0, collectives=BUDGET)
    # rank 1 cannot prepare the first all-reduce; both ranks agree, and train on
    result = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT="collectives_fail:1")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    epochs, final, run = read_records(tmp_path)
    assert final["status"] == "ok" and len(epochs) == 2 and final["iou"] is not None
    rows = table(tmp_path)
    assert all(not row["latency_us"] for row in rows)
    assert "failed on another rank" in rows[0]["reason"]  # rank 0 writes the table
    assert run["collectives"]["busbw_gbps"] is None and "failed" in run["collectives"]["reason"]


def test_a_one_gpu_cell_has_no_table_and_says_why(prepared_data, tmp_path):
    run = trained("torch", "native", prepared_data, tmp_path, gpus=1)
    assert not (tmp_path / TABLE).exists()
    assert run["collectives"]["reason"] == "one replica: nothing to exchange"
    assert json.loads((tmp_path / "run.json").read_text())["collectives"]["latency_us"] is None
