"""The fsdp and dp backends: where they are refused, and dp's data order and GPU wiring (faked CUDA)."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from conftest import cell_settings
from scalebench.launch import rank_env
from scalebench.train.accumulation import ONE_BATCH_STEP
from scalebench.train.devices import DeviceError
from scalebench.train.settings import RunSettings
from scalebench.train.torch import data, dp, framework, fsdp, runtime
from scalebench.train.torch.model import UNet

BATCH = 4


def run_settings(backend: str, gpus: int, env: dict | None = None, **training) -> RunSettings:
    settings = cell_settings("torch", "native", gpus, **training)
    settings["cell"]["backend"] = backend
    settings["gpus_per_node"] = 4
    return RunSettings.from_json(settings, "data", "out", env=env or {})


def test_fsdp_with_one_gpu_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"backend fsdp .* matrix.gpus = 1: .* use backend native"):
        fsdp.create(run_settings("fsdp", 1), rank_env.detect({}))
    backend = fsdp.create(run_settings("fsdp", 2), rank_env.detect({}))
    assert backend.shards_parameters and backend.checkpoint_on_all_ranks and backend.processes(2) == 2


def test_dp_is_one_process_with_a_replica_per_gpu():
    backend = dp.create(run_settings("dp", 4), rank_env.detect({}))
    assert backend.processes(4) == 1
    assert (backend.world_size, backend.replicas, backend.replica_ids) == (1, 4, [0, 1, 2, 3])


def test_dp_beyond_one_device_on_the_cpu_is_refused_before_training():
    backend = dp.create(run_settings("dp", 2), rank_env.detect({}))
    backend.device_type = "cpu"
    with pytest.raises(ValueError, match=r"DataParallel splits a batch over GPUs; on the CPU there is one device"):
        backend.setup(run_settings("dp", 2))


def test_dp_of_one_gpu_on_the_cpu_trains_the_plain_module():
    backend = dp.create(run_settings("dp", 1), rank_env.detect({}))
    backend.device_type = "cpu"
    backend.setup(run_settings("dp", 1))
    model = UNet()
    optimizer = torch.optim.Adam(model.parameters())
    assert backend.distribute(model, optimizer) == (model, optimizer)
    assert backend.allreduce_sum([1.0, 2.0]).tolist() == [1.0, 2.0] and backend.allgather_text("a") == ["a"]
    assert backend.options() == {"dp": {"processes": 1, "device_ids": None}}


@pytest.mark.parametrize("replicas", [2, 3])
def test_a_dp_step_reads_exactly_what_the_ddp_ranks_read_together_in_that_step(prepared_data, replicas):
    indices = list(range(32)) * 2
    loader_settings = run_settings("dp", replicas).training.loader
    rank_loaders = [
        data.train_loader(str(prepared_data), indices, replicas, [rank], 1, BATCH, loader_settings, False)
        for rank in range(replicas)
    ]
    dp_loader, dp_sampler = data.train_loader(
        str(prepared_data), indices, replicas, list(range(replicas)), 1, BATCH, loader_settings, False
    )
    for epoch in (0, 3):
        dp_sampler.set_epoch(epoch)
        for _, sampler in rank_loaders:
            sampler.set_epoch(epoch)
        steps = list(dp_loader)
        per_rank = [list(loader) for loader, _ in rank_loaders]
        assert len(steps) == len(per_rank[0]) == len(indices) // replicas // BATCH
        for step, (images, masks) in enumerate(steps):
            # in replica order, so DataParallel's split along the batch hands GPU r rank r's samples
            assert torch.equal(images, torch.cat([batches[step][0] for batches in per_rank]))
            assert torch.equal(masks, torch.cat([batches[step][1] for batches in per_rank]))


def test_one_replica_reads_distributed_samplers_order_in_whole_batches():
    shards = data.ReplicaShards(range(30), 3, [1], seed=5, batch=BATCH)
    shards.set_epoch(2)
    sampler = torch.utils.data.DistributedSampler(range(30), num_replicas=3, rank=1, seed=5, drop_last=False)
    sampler.set_epoch(2)
    assert list(shards) == list(sampler)[: 2 * BATCH] and len(shards) == 2 * BATCH


def test_a_step_of_several_replicas_counts_each_replicas_batch_and_loss(prepared_data):
    # a 2-replica dp process on the CPU (setup refuses it; built here without it), no batch norm:
    # the step's loss over both halves is the mean of the halves' losses
    run = run_settings("dp", 2, batch_norm=False)
    run = dataclasses.replace(run, data_dir=str(prepared_data))
    backend = dp.create(run, rank_env.detect({}))
    torch_framework = framework.create(run, backend)
    torch_framework.device, torch_framework.autocast = torch.device("cpu"), None
    torch_framework.build()
    torch_framework.distribute()
    torch_framework.prepare_data(list(range(32)))
    images, masks = next(iter(torch_framework.epoch_batches(0, 0.0)))  # rate 0: the model stays as it is
    with torch.no_grad():
        halves = [
            torch.nn.functional.binary_cross_entropy_with_logits(
                torch_framework.model(runtime.to_device(images[part], torch.device("cpu"))), masks[part]
            ).item()
            for part in (slice(0, BATCH), slice(BATCH, 2 * BATCH))
        ]
    torch_framework.train_step((images, masks), ONE_BATCH_STEP)
    loss_sum, batches = torch_framework.epoch_loss()
    assert batches == 2 and len(images) == 2 * BATCH
    assert loss_sum == pytest.approx(sum(halves), rel=1e-5)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch believes it has `count` GPUs; set_device calls are recorded."""
    state = {"count": 4, "current": []}
    properties = types.SimpleNamespace(total_memory=80 * 2**30, multi_processor_count=132, name="Fake GPU")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: state["count"] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state["count"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: state["current"].append(device))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    return state


def test_dp_takes_every_gpu_of_its_cell_from_the_first(fake_cuda, monkeypatch):
    run = run_settings("dp", 4, {"SCALEBENCH_EXECUTOR": "slurm"}, precision="bf16")
    backend = dp.create(run, rank_env.detect({}))
    torch_framework = framework.create(run, backend)
    monkeypatch.setattr(runtime, "set_determinism", lambda *args: None)
    torch_framework.start(run)
    # the model is built on the first GPU, current for every allocation
    assert torch_framework.device == torch.device("cuda", 0) and fake_cuda["current"] == [torch.device("cuda", 0)]
    assert backend.device_type == "gpu" and backend.options() == {"dp": {"processes": 1, "device_ids": [0, 1, 2, 3]}}
    model = UNet()
    wrapped, _ = backend.distribute(model, torch.optim.Adam(model.parameters()))
    assert isinstance(wrapped, torch.nn.DataParallel)
    assert wrapped.device_ids == [0, 1, 2, 3] and wrapped.output_device == 0
    assert wrapped.src_device_obj == torch.device("cuda", 0)
    # each replica's thread runs under the cell's autocast type, not CUDA's default float16
    assert isinstance(wrapped.module, dp.AutocastReplica) and wrapped.module.dtype == torch.bfloat16
    assert wrapped.module.module is model


def test_dp_needs_all_its_gpus_visible_in_its_one_process(fake_cuda):
    fake_cuda["count"] = 2
    run = run_settings("dp", 4, {"SCALEBENCH_EXECUTOR": "slurm"})
    torch_framework = framework.create(run, dp.create(run, rank_env.detect({})))
    with pytest.raises(DeviceError, match=r"1 rank\(s\) on this node need 4 GPUs but torch .* sees 2"):
        torch_framework.start(run)
    assert fake_cuda["current"] == []
