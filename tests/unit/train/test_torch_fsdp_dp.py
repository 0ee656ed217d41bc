"""The fsdp and dp backends: where they are refused, and dp's data order and GPU wiring (faked CUDA)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch
from conftest import cell_settings
from scalebench import backends
from scalebench.measures import batches_per_epoch
from scalebench.refusal import SettingRefused
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import accumulation, faults, rank_env
from scalebench.train.accumulation import ONE_BATCH_STEP
from scalebench.train.devices import DeviceError
from scalebench.train.placement import DataPlacement
from scalebench.train.preflight import check_launch, check_replicas
from scalebench.train.torch import data, dp, fsdp, model, runtime, steps
from scalebench.train.torch.model import UNet

ENVIRONMENT = "torch"

BATCH = 4


SLURM_JOB = {"SCALEBENCH_EXECUTOR": "slurm"}  # launch.py sets it for the ranks of a SLURM cell


def run_settings(backend: str, gpus: int, binding: str = "node", **training) -> RunSettings:
    settings = cell_settings("torch", "native", gpus, **training)
    settings["cell"]["backend"] = backend
    settings["gpus_per_node"] = 4
    if binding != "node":
        settings["gpu_binding"] = binding
    return RunSettings.from_json(settings, "data", "out")


def test_fsdp_with_one_gpu_is_refused_naming_the_key_with_its_entrys_reason():
    place = rank_env.detect({})
    with pytest.raises(SettingRefused, match=r"^matrix.gpus = 1: fsdp needs at least 2 ranks \(with one there"):
        check_launch(1, place.processes_source, "torch", "fsdp", 1)
    check_launch(2, place.processes_source, "torch", "fsdp", 2)
    backend = fsdp.FSDPBackend(place)
    assert backend.spec.shards_state and backend.checkpoint_on_all_ranks


def test_dp_is_one_process_with_a_replica_per_gpu():
    backend = dp.create(run_settings("dp", 4), rank_env.detect({}), "cpu", False)
    check_launch(1, "the launcher", "torch", "dp", 4)  # one process for the cell's four GPUs: its entry's one_process
    assert (backend.processes, backend.replicas, backend.replica_ids) == (1, 4, [0, 1, 2, 3])


def test_dp_beyond_one_device_on_the_cpu_is_refused_before_training_with_its_entrys_reason(monkeypatch):
    backend = dp.create(run_settings("dp", 2), rank_env.detect({}), "cpu", False)
    with pytest.raises(SettingRefused, match=r"matrix.gpus = 2: dp splits a batch over GPUs only; on the CPU it has"):
        check_replicas(backend, 2)
    check_replicas(dp.create(run_settings("dp", 2), rank_env.detect({}), "cuda", False), 2)  # on GPUs: all
    monkeypatch.setitem(backends.REGISTRY["torch"], "dp", dataclasses.replace(backends.DP, cpu_devices=None))
    check_replicas(backend, 2)  # the entry, changed: the rank follows it


def test_dp_of_one_gpu_on_the_cpu_trains_the_plain_module():
    backend = dp.create(run_settings("dp", 1), rank_env.detect({}), "cpu", False)
    network = UNet()
    optimizer = torch.optim.Adam(network.parameters())
    assert backend.distribute(network, optimizer) == (network, optimizer)
    assert backend.allreduce_sum([1.0, 2.0]).tolist() == [1.0, 2.0] and backend.allgather_text("a") == ["a"]
    assert backend.options() == {"dp": {"processes": 1, "device_ids": None}}


def host_and_device_batches(data_dir: str, indices: list[int], replicas: int, replica_ids: list[int]):
    """The training batches of these replicas with host placement and with device placement (CPU)."""
    loader_settings = run_settings("dp", replicas).training.loader
    cpu = torch.device("cpu")
    batches = batches_per_epoch(len(indices), replicas, BATCH)
    host_sampler = data.train_sampler(data_dir, indices, replicas, replica_ids, 1, BATCH, batches)
    host = data.host_train_loader(data_dir, host_sampler, loader_settings, False, cpu)
    device_sampler = data.train_sampler(data_dir, indices, replicas, replica_ids, 1, BATCH, batches)
    per_replica = device_sampler.replica_samples(epochs=4)
    stores = [data.DeviceSamples(data_dir, samples, cpu) for samples in per_replica]
    device = data.DeviceTrainBatches(indices, device_sampler, stores)
    return (host, host_sampler), (device, device_sampler)


def step_images(batch) -> tuple[torch.Tensor, torch.Tensor]:
    images, masks = batch
    if isinstance(images, data.ReplicaInputs):  # device placement, several replicas: one part each
        images = torch.cat(images.parts)
    return images, masks


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("replicas", [2, 3])
def test_a_dp_step_reads_exactly_what_the_ddp_ranks_read_together_in_that_step(prepared_data, replicas, placement):
    indices = list(range(32)) * 2
    which = 0 if placement == "host" else 1
    rank_loaders = [
        host_and_device_batches(str(prepared_data), indices, replicas, [rank])[which] for rank in range(replicas)
    ]
    dp_loader, dp_sampler = host_and_device_batches(str(prepared_data), indices, replicas, list(range(replicas)))[which]
    for epoch in (0, 3):
        dp_sampler.set_epoch(epoch)
        for _, sampler in rank_loaders:
            sampler.set_epoch(epoch)
        steps = [step_images(batch) for batch in dp_loader]
        per_rank = [list(loader) for loader, _ in rank_loaders]
        assert len(steps) == len(per_rank[0]) == len(indices) // replicas // BATCH
        for step, (images, masks) in enumerate(steps):
            # in replica order, so DataParallel's split along the batch hands GPU r rank r's samples
            assert torch.equal(images, torch.cat([batches[step][0] for batches in per_rank]))
            assert torch.equal(masks, torch.cat([batches[step][1] for batches in per_rank]))


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_device_placement_gives_the_host_loaders_batches_bit_for_bit(prepared_data, replicas):
    indices = list(range(32)) * 2
    (host, host_sampler), (device, device_sampler) = host_and_device_batches(
        str(prepared_data), indices, replicas, list(range(replicas))
    )
    for epoch in (0, 1, 3):
        host_sampler.set_epoch(epoch)
        device_sampler.set_epoch(epoch)
        host_steps, device_steps = list(host), [step_images(batch) for batch in device]
        assert len(host_steps) == len(device_steps) > 0
        for (host_images, host_masks), (images, masks) in zip(host_steps, device_steps, strict=True):
            assert images.dtype == torch.float32 and images.shape == (replicas * BATCH, 1, 32, 48)
            assert images.stride() == (32 * 48, 1, 48, 1)  # channels-last strides, as the model's layout
            assert torch.equal(images, host_images) and torch.equal(masks, host_masks)
            assert float(images.max()) <= 1.0 and set(masks.unique().tolist()) <= {0.0, 1.0}


def test_device_samples_refuse_a_sample_they_did_not_load(prepared_data):
    store = data.DeviceSamples(str(prepared_data), [3, 1, 2], torch.device("cpu"))
    assert store.nbytes == 3 * 2 * 32 * 48
    with pytest.raises(KeyError, match=r"samples \[0\] were not loaded"):
        store.rows(np.array([1, 0]))


def test_one_replica_reads_distributed_samplers_order_in_whole_batches():
    shards = data.ReplicaShards(range(30), 3, [1], seed=5, batch=BATCH, batches=batches_per_epoch(30, 3, BATCH))
    shards.set_epoch(2)
    sampler = torch.utils.data.DistributedSampler(range(30), num_replicas=3, rank=1, seed=5, drop_last=False)
    sampler.set_epoch(2)
    assert list(shards) == list(sampler)[: 2 * BATCH] and len(shards) == 2 * BATCH


def test_a_step_of_several_replicas_counts_each_replicas_batch_and_loss(prepared_data):
    # a 2-replica dp process on the CPU (preflight refuses it; built here without it), no batch norm:
    # the step's loss over both halves is the mean of the halves' losses
    run = dataclasses.replace(run_settings("dp", 2, batch_norm=False), data_dir=str(prepared_data))
    backend = dp.create(run, rank_env.detect({}), "cpu", False)
    device, numerics, delays = (
        runtime.Device(torch.device("cpu"), []),
        runtime.Numerics(None, True),
        faults.EpochDelays(faults.NO_FAULTS, 0),
    )
    distributed = model.distribute(run, model.build(run, device, numerics, backend), backend, None, delays)
    batches = accumulation.epoch_batches(run.training, 32, backend.replicas, 1)
    order = data.build_order(run, backend, list(range(32)), batches)
    epoch_data = data.build_data(run, device, backend, order, DataPlacement("host", 0, "test"), [])
    taken = steps.Steps(run, distributed, device, numerics, backend, None, delays)
    taken.start_epoch(0, 0.0)  # rate 0: the model stays as it is
    images, masks = next(iter(epoch_data.epoch(0)))
    with torch.no_grad():
        halves = [
            torch.nn.functional.binary_cross_entropy_with_logits(distributed.network(images[part]), masks[part]).item()
            for part in (slice(0, BATCH), slice(BATCH, 2 * BATCH))
        ]
    taken.train((images, masks), ONE_BATCH_STEP)
    loss_sum, replica_batches = taken.epoch_loss()
    assert replica_batches == 2 and len(images) == 2 * BATCH
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


def test_dp_takes_every_gpu_of_its_cell_from_the_first(fake_cuda):
    run = run_settings("dp", 4, precision="bf16")
    process, place = ProcessFacts.of_rank(run, SLURM_JOB), rank_env.detect({})
    device = runtime.build_device(run, process, place)
    backend = dp.create(run, place, device.type, process.share_gpu)
    # the model is built on the first GPU, current for every allocation
    assert device.device == torch.device("cuda", 0) and fake_cuda["current"] == [torch.device("cuda", 0)]
    assert backend.device_type == "cuda" and backend.options() == {"dp": {"processes": 1, "device_ids": [0, 1, 2, 3]}}
    network = UNet()
    wrapped, _ = backend.distribute(network, torch.optim.Adam(network.parameters()))
    assert isinstance(wrapped, torch.nn.DataParallel)
    assert wrapped.device_ids == [0, 1, 2, 3] and wrapped.output_device == 0
    assert wrapped.src_device_obj == torch.device("cuda", 0)
    # each replica's thread runs under the cell's autocast type, not CUDA's default float16
    assert isinstance(wrapped.module, dp.AutocastReplica) and wrapped.module.dtype == torch.bfloat16
    assert wrapped.module.module is network


def test_dp_needs_all_its_gpus_visible_in_its_one_process(fake_cuda):
    fake_cuda["count"] = 2
    run = run_settings("dp", 4)
    process = ProcessFacts.of_rank(run, SLURM_JOB)
    with pytest.raises(DeviceError, match=r"1 rank\(s\) on this node need 4 GPUs but torch .* sees 2"):
        runtime.build_device(run, process, rank_env.detect({}))
    assert fake_cuda["current"] == []


@pytest.mark.parametrize("binding", ["node", "task"])
def test_dp_s_one_task_drives_every_gpu_it_sees_under_either_binding(fake_cuda, binding):
    # task binding asks --gpus-per-task=4 for dp's one task: it sees the cell's four, as under node binding
    run = run_settings("dp", 4, binding=binding)
    process, place = ProcessFacts.of_rank(run, SLURM_JOB), rank_env.detect({})
    device = runtime.build_device(run, process, place)
    backend = dp.create(run, place, device.type, process.share_gpu)
    assert device.replica_devices == [torch.device("cuda", i) for i in range(4)]
    assert backend.options()["dp"]["device_ids"] == [0, 1, 2, 3]


def test_dp_under_task_binding_refuses_a_task_with_fewer_gpus_than_its_cell(fake_cuda):
    fake_cuda["count"] = 2
    run = run_settings("dp", 4, binding="task")
    process = ProcessFacts.of_rank(run, SLURM_JOB)
    with pytest.raises(
        DeviceError, match=r"this task sees 2 GPU\(s\) under cluster.gpu_binding: task, fewer than its 4"
    ):
        runtime.build_device(run, process, rank_env.detect({}))
    assert fake_cuda["current"] == []


@pytest.mark.parametrize("binding", ["node", "task"])
def test_fsdp_ranks_take_distinct_gpus_under_either_binding(fake_cuda, binding):
    # node binding: each task sees the node's 4 GPUs and takes its local rank's; task binding: only its own
    fake_cuda["count"] = 4 if binding == "node" else 1
    run = run_settings("fsdp", 4, binding=binding)
    process = ProcessFacts.of_rank(run, SLURM_JOB)
    chosen = [runtime.choose_device(run, process, local_rank, 4) for local_rank in range(4)]
    expected = [torch.device("cuda", i if binding == "node" else 0) for i in range(4)]
    assert chosen == expected and fake_cuda["current"] == expected
