"""run.json's training record of PyTorch's backends, as the cell resolved it (test_provenance.py)."""

from __future__ import annotations

from scalebench.train import rank_env
from scalebench.train.torch.horovod import HorovodTorchBackend
from test_provenance import TWO_RANKS, record_of, settings

ENVIRONMENT = "torch"


def test_a_horovod_cell_records_its_batch_rate_precision_and_options_as_resolved():
    run = settings(
        "torch",
        "horovod",
        2,
        horovod={"backward_passes_per_step": 3},
        base_lr=0.002,
        lr_scaling="sqrt",
        precision="bf16",
    )
    record = record_of(run, HorovodTorchBackend(rank_env.detect(TWO_RANKS), run.training.horovod))
    assert (record["batch_per_gpu"], record["backward_passes_per_step"], record["global_batch"]) == (4, 3, 24)
    assert record["lr_scaling"] == "sqrt" and record["scaled_lr"] == 0.002 * 2**0.5
    assert record["precision"] == "bf16" and record["deterministic"] is True
    assert record["collective_timeout_s"] == 30 and record["threads_per_rank"] == 1 and record["device"] == "cpu"
    assert record["horovod"] == {
        "backward_passes_per_step": 3,
        "allow_cpu_reductions": False,
    }
    assert record["loader"]["workers"] == 0 and "tf_strategy" not in record


def test_the_resolved_values_replace_the_settings_of_the_same_name():
    run = settings("torch", "native", 2, scaling="strong", global_batch=16, deterministic=None, threads_per_rank=None)
    backend = HorovodTorchBackend(rank_env.detect(TWO_RANKS), run.training.horovod)
    record = record_of(run, backend)
    # the images per step as trained, the rank's threads, the determinism and device it resolved
    assert (record["global_batch"], record["batch_per_gpu"]) == (16, 8)
    assert record["threads_per_rank"] == 1 and record["deterministic"] is True and record["device"] == "cpu"
    assert record["target_iou"] is None  # the report's target: it ends no training here
    stopping = settings("torch", "native", 2, stop_at_target=True, target_iou=0.6, eval_every=1)
    assert record_of(stopping, backend)["target_iou"] == 0.6
