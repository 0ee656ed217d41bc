"""What a rank checks and decides before its first step, so that a cell no retry can change ends
refused at once, naming the key to change (refusal.py), and every rank starts alike.

The checks: the launch fits the cell and the cell its backend's registry entry (entry.py, before
any rank joins the others: the processes it needs, its fewest ranks) and the backend has as many
replicas as it asks for, no more than it can drive on a CPU; the batch fits a shard of the training set; the
backend applies the gradient compression asked for; the UNet at model.width and its batch can fit
the fullest device of the cell; training.profile's window lies inside an epoch. The decision:
where the samples live (training.loader.placement, placement.py), from figures every rank
reduces once. The loop calls them in its setup; each is a collective where it reduces.
"""

from __future__ import annotations

import numpy as np

from scalebench import architecture, backends
from scalebench.cell import width_key
from scalebench.refusal import Refused, SettingRefused
from scalebench.settings import ProfileSettings, RunSettings
from scalebench.train import placement
from scalebench.train.interfaces import Backend, Device, SampleOrder


class LaunchMismatch(Refused, RuntimeError):
    """The launcher started the ranks differently from what the cell asks for."""


def check_launch(started: int, source: str, framework: str, backend: str, gpus: int) -> None:
    """The launcher started as many processes as the cell needs, and the cell has as many GPUs as
    the backend's registry entry needs (min_ranks), before any rank joins the others. The planner
    leaves such cells out; a rank started by hand is refused here, with the entry's reason."""
    spec = backends.spec(framework, backend)
    if gpus < spec.min_ranks:
        raise SettingRefused(f"matrix.gpus = {gpus}: {spec.min_ranks_reason}")
    expected = backends.processes(framework, backend, gpus)
    if started == expected:
        return
    message = f"{source} = {started} ranks, but the cell asks for {gpus} GPUs"
    if expected != gpus:  # a backend that drives several devices from one process
        message += (
            f", which {backend} drives from {expected} process(es): the cell's launcher template must "
            "start that many (e.g. '{python} {program}')"
        )
    raise LaunchMismatch(message)


def check_replicas(backend: Backend, gpus: int) -> None:
    """Once the backend has joined the ranks: it trains as many replicas as the cell has GPUs, and
    on a CPU rank no more than its registry entry can drive there (cpu_devices: dp's one device)."""
    if backend.replicas != gpus:
        raise LaunchMismatch(f"{backend.name} has {backend.replicas} replicas, the cell asks for {gpus}")
    limit = backend.spec.cpu_devices
    if backend.device_type == "cpu" and limit is not None and gpus > limit:
        raise SettingRefused(
            f"matrix.gpus = {gpus}: {backend.spec.cpu_reason}, and this rank has no GPU (training.device, or "
            f"none on its node): use backend native, or {backend.name} on a GPU node"
        )


def check_compression(backend: Backend, compression: str) -> None:
    """The backend reduces gradients with the compression the cell asked for (entry.py refuses a
    backend that has none before it starts; this catches one that forgot to apply it)."""
    if backend.gradient_compression != compression:
        raise RuntimeError(
            f"training.compression: the cell asks for {compression}, but backend {backend.name} "
            f"reduces its gradients with {backend.gradient_compression}"
        )


def check_batch(batch: int, train_pairs: int, replicas: int) -> None:
    shard = train_pairs // replicas
    if batch > shard:
        raise SettingRefused(
            f"training.batch_per_gpu = {batch} is larger than the shard of the training set "
            f"({train_pairs} pairs / {replicas} ranks = {shard})"
        )


def check_profile(profile: ProfileSettings | None, steps: int) -> None:
    """training.profile's window lies inside an epoch (config checks refuse it first where the
    dataset's size is known before it is prepared: synthetic data)."""
    if profile is not None and profile.steps > steps:
        raise SettingRefused(
            f"training.profile.steps = {profile.steps} is more than the {steps} steps an epoch of this cell has"
        )


def check_model_fits(run: RunSettings, backend: Backend, free: int | None) -> None:
    """Refuse, before the model is built, a width whose model and batch certainly cannot fit the
    fullest device of the cell (architecture.memory_floor_bytes: a lower bound; `free`: this
    rank's free device memory, the smallest among the ranks counts): the user's model.width, not a
    failure a retry could change."""
    training = run.training
    fewest = -float(backend.allreduce_max(np.array([-(np.inf if free is None else free)], dtype=np.float64))[0])
    shards = backend.processes if backend.spec.shards_state else 1  # the planner reads the same entry
    itemsize = architecture.activation_itemsize(training.precision)
    batch = training.batch_per_gpu
    needed = architecture.memory_floor_bytes(run.model_width, batch, run.image_size, itemsize, shards)
    if needed > fewest:
        raise SettingRefused(
            f"{width_key(dict(run.cell.axes))} = {run.model_width}: the UNet's "
            f"{architecture.parameter_count(run.model_width):,} parameters "
            f"and a batch of {batch} need at least {needed / 2**30:.2f} GiB on each device (weights, gradients "
            f"and Adam's moments, and the convolutions' outputs), more than the {fewest / 2**30:.2f} GiB free "
            "on the fullest device of the cell: use a smaller width or batch"
        )


def place_data(
    run: RunSettings, backend: Backend, device: Device, order: SampleOrder, eval_shards: list[list[int]]
) -> placement.DataPlacement:
    """training.loader.placement for every rank alike: with auto, from the largest need (the
    busiest device's samples over the run, from the sample order) and the smallest free memory
    among the ranks; device that cannot fit is refused before any step."""
    loader = run.training.loader
    figures = [0.0, 0.0, 0.0]
    if loader.placement != "host":
        per_replica = order.replica_samples(run.training.epochs)
        needed = placement.busiest_device_bytes(per_replica, eval_shards, run.image_size)
        figures = placement.local_figures(needed, device.free_bytes(backend.local_processes))
    reduced = backend.allreduce_max(np.array(figures, dtype=np.float64)).tolist()
    decided = placement.decide(loader.placement, reduced, loader.device_memory_share, backend.device_type)
    if backend.rank == 0:
        print(f"data placement: {decided.kind} ({decided.reason})", flush=True)
    return decided
