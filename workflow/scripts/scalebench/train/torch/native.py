"""PyTorch DistributedDataParallel: Gloo on CPU, NCCL on GPU."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

from scalebench.settings import RunSettings
from scalebench.train.collectives import Bench
from scalebench.train.interfaces import Backend
from scalebench.train.rank_env import RankInfo
from scalebench.train.torch import collectives, step_timing


class DDPBackend(Backend):
    framework, name = "torch", "native"
    untimed_comm = ""  # its communication hook times each bucket's allreduce (step_timing.timed_comm_hook)

    def __init__(self, place: RankInfo, compression: str = "none") -> None:
        super().__init__(place)
        self.gradient_compression = compression

    def setup(self, run: RunSettings) -> None:
        place = self.place
        # device cpu: Gloo, even beside a GPU. Ranks sharing a GPU (SCALEBENCH_SHARE_GPU, a functional
        # check) reduce through Gloo too: NCCL refuses two ranks on one device ("Duplicate GPU detected").
        self.collective = "nccl" if self.device_type == "cuda" and not self.share_gpu else "gloo"
        dist.init_process_group(
            self.collective,
            init_method=f"tcp://{place.master_addr}:{place.master_port}",
            rank=self.rank,
            world_size=self.processes,
            timeout=timedelta(seconds=run.training.collective_timeout_s) if run.training.collective_timeout_s else None,
        )
        # NCCL reduces tensors on the GPU; Gloo on the CPU
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.collective == "nccl" else None
        print(
            f"rank {self.rank}/{self.processes}: process group {self.collective} via {place.launcher} "
            f"at {place.master_addr}:{place.master_port}",
            flush=True,
        )

    def distribute(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple:
        # DDP broadcasts rank 0's parameters and buffers when it wraps the model, and
        # averages gradients in backward(); the optimizer stays as it is.
        device = next(model.parameters()).device
        device_ids = [device.index] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        self.bucket_bytes = int(wrapped.bucket_bytes_cap)  # the size its gradients are reduced in
        # fp16: each gradient bucket is cast to float16, divided by the processes, allreduced and cast back
        hook = fp16_compress_hook if self.gradient_compression == "fp16" else None
        marks = self.step_marks
        if marks is not None and marks.comm is not None:  # the same reduction, each allreduce's span noted
            hook = step_timing.timed_comm_hook(marks, hook, self.processes)
            step_timing.timed_buffer_broadcast(wrapped, marks)
        if hook is not None:
            wrapped.register_comm_hook(state=None, hook=hook)
        return wrapped, optimizer

    def broadcast_from_root(self, tensors: list) -> None:
        for tensor in tensors:
            dist.broadcast(tensor, src=0)

    def _reduce(self, values: np.ndarray, op) -> np.ndarray:
        tensor = torch.as_tensor(np.asarray(values, dtype=np.float64))
        if self.device is not None:
            tensor = tensor.to(self.device)
        dist.all_reduce(tensor, op=op)
        return tensor.cpu().numpy()

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, dist.ReduceOp.SUM)

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, dist.ReduceOp.MAX)

    def allgather_text(self, text: str) -> list[str]:
        gathered: list = [None] * self.processes
        dist.all_gather_object(gathered, text)
        return gathered

    def versions(self) -> dict:
        return {"distributed": f"torch.distributed {dist.get_backend()}"}

    def collective_bench(self) -> Bench:
        device = self.device if self.device is not None else torch.device("cpu")
        return collectives.process_group(
            device, ("all_reduce",), self.bucket_bytes, "DDP's bucket_bytes_cap (bucket_cap_mb)"
        )

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def create(run: RunSettings, place: RankInfo) -> DDPBackend:
    return DDPBackend(place, run.training.compression)
