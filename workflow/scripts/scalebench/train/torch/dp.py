"""PyTorch nn.DataParallel: one process driving every GPU of one node.

The single-node baseline DDP is compared against. The process reads each
step's whole global batch (batch_per_gpu x GPUs; data.ReplicaShards gives the
samples the DDP ranks would read together); with host placement DataParallel
splits it along the batch over its GPUs, with device placement each GPU's part
is already there (ReplicaDataParallel). It runs a replica of the model on each in a thread,
gathers the outputs on the first GPU and sums the gradients there. Replicas
are the cell's GPUs, so the learning-rate rule and the image counts are DDP's;
the collectives on arrays are trivial in one process.

On the CPU there is one device: a one-GPU cell runs as a plain module there,
a larger one is refused before the first step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from scalebench.settings import RunSettings
from scalebench.train.collectives import Bench
from scalebench.train.interfaces import Backend
from scalebench.train.rank_env import RankInfo
from scalebench.train.torch import collectives, step_timing
from scalebench.train.torch.data import ReplicaInputs


class AutocastReplica(nn.Module):
    """The model under the cell's autocast type in each of DataParallel's threads: the type is
    thread-local, and DataParallel passes on only whether autocast is on (a bfloat16 run's
    replicas would compute in CUDA's default, float16)."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.module, self.dtype = module, dtype

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=self.dtype):
            return self.module(images)


class ReplicaDataParallel(nn.DataParallel):
    """DataParallel that also takes a step's images already on their replicas' GPUs (device
    placement, data.ReplicaInputs): it scatters nothing then; a plain batch it splits as usual.
    With the step split's marks, each forward's replicas mark the end of the backward's compute."""

    def __init__(self, module: nn.Module, device_ids: list[int], marks=None) -> None:
        super().__init__(module, device_ids=device_ids, output_device=device_ids[0])
        self.marks = marks

    def replicate(self, module, device_ids):
        replicas = super().replicate(module, device_ids)
        if self.marks is not None:
            step_timing.dataparallel_compute_end(replicas, self.marks)
        return replicas

    def scatter(self, inputs, kwargs, device_ids):
        if len(inputs) == 1 and isinstance(inputs[0], ReplicaInputs) and not kwargs:
            parts = inputs[0].parts
            return tuple((part,) for part in parts), tuple({} for _ in parts)
        return super().scatter(inputs, kwargs, device_ids)


class DataParallelBackend(Backend):
    framework, name = "torch", "dp"
    untimed_comm = (
        "DataParallel has no separately timed collectives: its copies (the broadcast of the weights, the scatter "
        "and gather of the batch, the sum of the gradients) run inside the passes, and on one device there are none"
    )

    def __init__(
        self,
        place: RankInfo,
        device_type: str = "cpu",
        share_gpu: bool = False,
        gpus: int = 1,
        autocast: str | None = None,
    ) -> None:
        super().__init__(place, device_type, share_gpu)
        self.replicas, self.replica_ids = gpus, list(range(gpus))
        # on the CPU it drives one device: a cell of more is refused (preflight.check_replicas,
        # from its registry entry's cpu_devices) before the model is built
        self.autocast = getattr(torch, autocast) if autocast else None  # training.autocast_dtype
        # the framework's device is the first (runtime.choose_device)
        self.device_ids = list(range(gpus)) if device_type == "cuda" else None

    def distribute(self, model: nn.Module, optimizer: torch.optim.Optimizer, marks=None) -> tuple:
        if self.device_ids is None:
            return model, optimizer
        # DataParallel copies the model from the first GPU to the others in every forward, and
        # the replicas' gradients add up there, where the optimizer steps
        module = AutocastReplica(model, self.autocast) if self.autocast is not None else model
        return ReplicaDataParallel(module, self.device_ids, marks), optimizer

    def broadcast_from_root(self, tensors: list) -> None:
        pass  # one process: the first GPU's statistics are the model's own

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    def allgather_text(self, text: str) -> list[str]:
        return [text]

    def versions(self) -> dict:
        if self.device_ids is None:
            return {"distributed": "none (DataParallel on one CPU device: a plain module)"}
        return {"distributed": f"torch.nn.DataParallel over {len(self.device_ids)} GPU(s)"}

    def options(self) -> dict:
        return {"dp": {"processes": 1, "device_ids": self.device_ids}}

    def collective_bench(self, model: nn.Module) -> Bench | str:
        if self.device_ids is None:  # a CPU cell of several devices is refused (preflight); this one has one
            return "DataParallel on one CPU device: nothing to exchange"
        return collectives.data_parallel(self.device_ids)


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> DataParallelBackend:
    """The backend of one process: nothing to join."""
    backend = DataParallelBackend(place, device_type, share_gpu, run.cell.gpus, run.training.autocast_dtype)
    where = f"GPUs {backend.device_ids}" if backend.device_ids else "the CPU (one device, a plain module)"
    print(f"rank 0/1: DataParallel over {where}", flush=True)
    return backend
