"""The PyTorch training contract, shared by the DDP and Horovod backends.

A backend (torch_ddp.py, torch_horovod.py) only starts the process group,
wraps the model and optimizer, and provides the collectives. Data, model, loop,
timing, evaluation, checkpoints and the records are here, so a difference
between backends in a figure can only come from the reduction itself.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from . import records
from .preprocess import load_arrays
from .schedule import learning_rate
from .torch_model import UNet, parameter_count


class Backend(Protocol):
    """What a PyTorch backend module provides (see torch_ddp.py)."""

    name: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    def setup(self, timeout_s: float) -> None: ...
    def wrap_model(self, model: nn.Module, device: torch.device) -> nn.Module: ...
    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer: ...
    def broadcast_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None: ...
    def broadcast_buffers(self, model: nn.Module) -> None: ...
    def allreduce_sum(self, tensor: torch.Tensor) -> torch.Tensor: ...
    def allreduce_max(self, tensor: torch.Tensor) -> torch.Tensor: ...
    def allgather_object(self, obj: object) -> list: ...
    def versions(self) -> dict: ...
    def shutdown(self) -> None: ...


class Diverged(Exception):
    """The loss stopped being finite."""


def set_determinism(seed: int) -> None:
    """Seed every generator a cell uses; deterministic kernels where they exist."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Deterministic mode also fills every new tensor with NaN, a check for kernels that read
    # memory they never wrote; it costs 7% of a CPU training step and changes no result.
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False


class SegmentationArrays(Dataset):
    """Items of the memory-mapped arrays; opened lazily so worker processes map them themselves."""

    def __init__(self, data_dir: str | Path, indices: list[int]):
        self.data_dir = str(data_dir)
        self.indices = indices
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._arrays is None:
            images, masks, _ = load_arrays(self.data_dir)
            self._arrays = (images, masks)
        images, masks = self._arrays
        index = self.indices[item]
        image = torch.from_numpy(np.array(images[index], dtype=np.float32) / 255.0).unsqueeze(0)
        mask = torch.from_numpy(np.array(masks[index], dtype=np.float32)).unsqueeze(0)
        return image, mask


def choose_device(setting: str, local_rank: int) -> torch.device:
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("training.device is cuda but torch sees no GPU")
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


# Channels-last (NHWC) activations and weights: 1.7x faster training steps on the CPU than NCHW
# (oneDNN), the layout tensor cores prefer, and the layout the TensorFlow UNet uses.
LAYOUT = torch.channels_last


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch on the device in the training layout."""
    return tensor.to(device, non_blocking=True, memory_format=LAYOUT)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return records.peak_host_memory_mb()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"cpu ({platform.processor() or platform.machine()})"


def amp_settings(training: dict, device: torch.device) -> tuple[bool, torch.dtype]:
    if training["precision"] != "amp":
        return False, torch.float32
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[training["amp_dtype"]]
    if dtype == torch.float16 and device.type == "cpu":
        raise ValueError("training.amp_dtype: float16 autocast needs a GPU; use bfloat16 on CPU")
    return True, dtype


def check_fault_injection(rank: int, epoch: int, step: int) -> None:
    """Test hook: SCALEBENCH_FAULT=oom:RANK:EPOCH raises the CUDA out-of-memory error there."""
    fault = os.environ.get("SCALEBENCH_FAULT", "")
    if fault.startswith("oom:") and step == 0:
        _, fault_rank, fault_epoch = fault.split(":")
        if int(fault_rank) == rank and int(fault_epoch) == epoch + 1:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by SCALEBENCH_FAULT)")


class Checkpoint:
    """Atomic, rank-0-written checkpoints keyed by the config hash."""

    def __init__(self, directory: Path, config_hash: str, enabled: bool):
        self.path = directory / "checkpoint.pt"
        self.config_hash = config_hash
        self.enabled = enabled

    def save(self, state: dict) -> None:
        if not self.enabled:
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        torch.save({**state, "config_hash": self.config_hash}, tmp)
        os.replace(tmp, self.path)

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as error:  # truncated or corrupt
            records.ignore_unreadable_checkpoint(self.path, error)
            return None
        if not records.checkpoint_matches(self.path, state.get("config_hash"), self.config_hash):
            return None
        return state

    def remove(self) -> None:
        if self.enabled:
            self.path.unlink(missing_ok=True)


def evaluate(
    model: nn.Module,
    backend: Backend,
    data_dir: str,
    test: list[int],
    batch: int,
    device: torch.device,
    autocast: tuple[bool, torch.dtype],
) -> tuple[float, float]:
    """Test loss and IOU over the whole test set: each rank takes every world_size-th
    sample (none dropped or repeated), sums are reduced across ranks."""
    shard = test[backend.rank :: backend.world_size]
    loader = DataLoader(SegmentationArrays(data_dir, shard), batch_size=batch, shuffle=False)
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, pixels, intersection, union
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for images, masks in loader:
            images, masks = to_device(images, device), to_device(masks, device)
            with torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                logits = model(images)
            logits = logits.float()
            predicted = logits > 0
            truth = masks > 0.5
            sums += torch.stack(
                [
                    F.binary_cross_entropy_with_logits(logits, masks, reduction="sum").double(),
                    torch.tensor(float(masks.numel()), dtype=torch.float64, device=device),
                    (predicted & truth).sum().double(),
                    (predicted | truth).sum().double(),
                ]
            )
    model.train(was_training)
    sums = backend.allreduce_sum(sums)
    loss, pixels, intersection, union = sums.tolist()
    return loss / max(pixels, 1), (intersection / union if union else 1.0)


def save_predictions(model: nn.Module, data_dir: str, test: list[int], count: int, out_dir: Path, device) -> None:
    from PIL import Image

    folder = out_dir / "predictions"
    folder.mkdir(exist_ok=True)
    dataset = SegmentationArrays(data_dir, test[:count])
    model.eval()
    with torch.no_grad():
        for item in range(len(dataset)):
            image, _ = dataset[item]
            logits = model(to_device(image.unsqueeze(0), device))
            mask = (logits[0, 0] > 0).to(torch.uint8).mul(255).cpu().numpy()
            Image.fromarray(mask).save(folder / f"test_{test[item]:05d}.png")


def run(backend: Backend, settings: dict, data_dir: str, out_dir: str, config_hash: str, clock: records.Clock) -> str:
    """Train one cell; returns its status. Raises on failures that should fail the job."""
    training, cell = settings["training"], settings["cell"]
    out = Path(out_dir)
    backend.setup(training["collective_timeout_s"])
    is_root = backend.rank == 0
    if backend.world_size != cell["gpus"]:
        raise RuntimeError(f"the launcher started {backend.world_size} ranks, the cell asks for {cell['gpus']}")
    threads = training["threads_per_rank"] or int(os.environ.get("SLURM_CPUS_PER_TASK", 1))
    torch.set_num_threads(threads)
    device = choose_device(training["device"], backend.local_rank)
    autocast = amp_settings(training, device)
    set_determinism(cell["seed"])

    _, _, manifest = load_arrays(data_dir)
    train_idx = manifest["train"] * training["dataset_repeat"]
    batch = training["batch_per_gpu"]
    shard = len(manifest["train"]) // backend.world_size
    if batch > shard:
        raise ValueError(
            f"training.batch_per_gpu = {batch} is larger than the shard of the training set "
            f"({len(manifest['train'])} pairs / {backend.world_size} ranks = {shard})"
        )

    model = UNet(batch_norm=training["batch_norm"]).to(device, memory_format=LAYOUT)
    provenance = records.base_provenance(cell, config_hash)
    provenance.update(
        parameters=parameter_count(model),
        world_size=backend.world_size,
        ranks_per_node=backend.local_world_size,
        threads_per_rank=threads,
        device=device.type,
        precision=training["precision"] if not autocast[0] else f"amp-{training['amp_dtype']}",
        layout="channels_last",
        versions={"torch": torch.__version__, **backend.versions(), **cuda_versions()},
    )
    hosts = backend.allgather_object(records.host_name())
    devices = backend.allgather_object(device_name(device))
    provenance.update(
        records.placement(hosts, devices, settings["dataset"]["image_size"], training, settings["peak_tflops"])
    )
    run_json = out / "run.json"
    if is_root:
        records.write_json_atomic(run_json, provenance)

    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate(0, training, backend.world_size), eps=1e-8)
    scaler = torch.amp.GradScaler(device.type, enabled=autocast[0] and autocast[1] == torch.float16)
    checkpoint = Checkpoint(out, config_hash, enabled=is_root and training["checkpoint_every"] > 0)
    resume = Checkpoint(out, config_hash, enabled=True).load() if training["checkpoint_every"] > 0 else None
    start_epoch, previous_records, train_time = 0, [], 0.0
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng"]["torch"])
        np.random.set_state(resume["rng"]["numpy"])
        random.setstate(resume["rng"]["python"])
        start_epoch, previous_records, train_time = resume["epoch"], resume["records"], resume["train_time_s"]
        print(f"resuming from checkpoint after epoch {start_epoch}", flush=True)
    model = backend.wrap_model(model, device)
    optimizer = backend.wrap_optimizer(optimizer, model)
    backend.broadcast_state(model, optimizer)
    raw_model = getattr(model, "module", model)

    metrics = records.MetricsWriter(out / "metrics.jsonl", enabled=is_root, previous=previous_records)
    sampler = DistributedSampler(
        SegmentationArrays(data_dir, train_idx),
        num_replicas=backend.world_size,
        rank=backend.rank,
        shuffle=True,
        seed=cell["seed"],
        drop_last=False,
    )
    loader_cfg = training["loader"]
    workers = loader_cfg["workers"]
    loader = DataLoader(
        sampler.dataset,
        batch_size=batch,
        sampler=sampler,
        drop_last=True,
        num_workers=workers,
        pin_memory=loader_cfg["pin_memory"] and device.type == "cuda",
        prefetch_factor=loader_cfg["prefetch_factor"] if workers else None,
        persistent_workers=workers > 0,
    )
    setup_s = clock.elapsed()
    epochs = training["epochs"]
    status = "ok"
    epoch_times: list[float] = [r["epoch_time_s"] for r in previous_records]
    try:
        for epoch in range(start_epoch, epochs):
            lr = learning_rate(epoch, training, backend.world_size)
            for group in optimizer.param_groups:
                group["lr"] = lr
            sampler.set_epoch(epoch)
            model.train()
            loss_sum = torch.zeros((), dtype=torch.float64, device=device)
            steps, wait = 0, 0.0
            synchronize(device)
            started = time.perf_counter()
            batches = iter(loader)
            while True:
                waited = time.perf_counter()
                item = next(batches, None)
                wait += time.perf_counter() - waited
                if item is None:
                    break
                check_fault_injection(backend.rank, epoch, steps)
                images, masks = (to_device(t, device) for t in item)
                with torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                    logits = model(images)
                loss = F.binary_cross_entropy_with_logits(logits.float(), masks)
                optimizer.zero_grad()  # set_to_none is the default; Horovod takes no argument
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                loss_sum += loss.detach().double()
                steps += 1
            synchronize(device)
            elapsed = time.perf_counter() - started
            reduced = backend.allreduce_sum(
                torch.stack([loss_sum, torch.tensor(float(steps), dtype=torch.float64, device=device)])
            )
            slowest = backend.allreduce_max(
                torch.tensor([elapsed, wait, peak_memory_mb(device)], dtype=torch.float64, device=device)
            ).tolist()
            mean_loss = reduced[0].item() / max(reduced[1].item(), 1)
            train_time += slowest[0]
            epoch_times.append(slowest[0])
            record = records.epoch_record(
                epoch + 1, mean_loss, lr, slowest, reduced[1].item(), batch, train_time, provenance
            )
            if records.diverged(mean_loss, training):
                metrics.write(record)
                raise Diverged(f"loss is {mean_loss} in epoch {epoch + 1} (max_loss {training['max_loss']})")
            if training["eval_every"] and (epoch + 1) % training["eval_every"] == 0:
                backend.broadcast_buffers(raw_model)
                record["test_loss"], record["test_iou"] = evaluate(
                    raw_model, backend, data_dir, manifest["test"], batch, device, autocast
                )
            metrics.write(record)
            steady = np.median(epoch_times[1:]) if len(epoch_times) > 1 else epoch_times[0]
            if is_root:
                print(records.progress_line(record, epochs, steady * (epochs - epoch - 1)), flush=True)
            if training["checkpoint_every"] and (epoch + 1) % training["checkpoint_every"] == 0 and epoch + 1 < epochs:
                checkpoint.save(
                    {
                        "model": raw_model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict(),
                        "epoch": epoch + 1,
                        "records": metrics.records,
                        "train_time_s": train_time,
                        "rng": {
                            "torch": torch.get_rng_state(),
                            "numpy": np.random.get_state(),
                            "python": random.getstate(),
                        },
                    }
                )
    except Diverged as error:
        status = "diverged"
        print(f"diverged: {error}", flush=True)
    except torch.OutOfMemoryError as error:
        status = "oom"
        print(f"out of memory: {error}", flush=True)

    final = records.final_record(status, setup_s, train_time, len(epoch_times))
    if status == "ok":
        backend.broadcast_buffers(raw_model)
        synchronize(device)
        started = time.perf_counter()
        final["test_loss"], final["iou"] = evaluate(
            raw_model, backend, data_dir, manifest["test"], batch, device, autocast
        )
        synchronize(device)
        final["test_time_s"] = backend.allreduce_max(
            torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
        ).item()
        if is_root and training["predictions"]:
            save_predictions(raw_model, data_dir, manifest["test"], training["predictions"], out, device)
    metrics.write(final)
    if is_root:
        records.finish(run_json, provenance, final, start_epoch)
        checkpoint.remove()
    return status


def cuda_versions() -> dict:
    versions = {"cuda": torch.version.cuda, "cudnn": None, "nccl": None}
    if torch.backends.cudnn.is_available():
        versions["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        try:
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # NCCL missing from this build
            pass
    return versions
