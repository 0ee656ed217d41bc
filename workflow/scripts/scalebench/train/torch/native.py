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


def join(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> tuple[str, torch.device | None]:
    """Start the process group (DDP's and FSDP's): its collective library, and the device it
    reduces tensors on (None: the CPU)."""
    # device cpu: Gloo, even beside a GPU. Ranks sharing a GPU (SCALEBENCH_SHARE_GPU, a functional
    # check) reduce through Gloo too: NCCL refuses two ranks on one device ("Duplicate GPU detected").
    collective = "nccl" if device_type == "cuda" and not share_gpu else "gloo"
    timeout = run.training.collective_timeout_s
    dist.init_process_group(
        collective,
        init_method=f"tcp://{place.master_addr}:{place.master_port}",
        rank=place.rank,
        world_size=place.processes,
        timeout=timedelta(seconds=timeout) if timeout else None,
    )
    print(
        f"rank {place.rank}/{place.processes}: process group {collective} via {place.launcher} "
        f"at {place.master_addr}:{place.master_port}",
        flush=True,
    )
    # NCCL reduces tensors on the GPU; Gloo on the CPU
    return collective, torch.device("cuda", torch.cuda.current_device()) if collective == "nccl" else None


class DDPBackend(Backend):
    framework, name = "torch", "native"
    untimed_comm = ""  # its communication hook times each bucket's allreduce (step_timing.timed_comm_hook)

    def __init__(
        self,
        place: RankInfo,
        device_type: str = "cpu",
        share_gpu: bool = False,
        compression: str = "none",
        collective: str = "gloo",
        device: torch.device | None = None,
    ) -> None:
        super().__init__(place, device_type, share_gpu)
        self.gradient_compression = compression
        self.collective = collective  # nccl or gloo (join)
        self.device = device  # where the collectives on arrays reduce: the GPU with NCCL, else None (the CPU)

    def distribute(self, model: nn.Module, optimizer: torch.optim.Optimizer, marks=None) -> tuple:
        # DDP broadcasts rank 0's parameters and buffers when it wraps the model, and
        # averages gradients in backward(); the optimizer stays as it is.
        device = next(model.parameters()).device
        device_ids = [device.index] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        # fp16: each gradient bucket is cast to float16, divided by the processes, allreduced and cast back
        hook = fp16_compress_hook if self.gradient_compression == "fp16" else None
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

    def collective_bench(self, model: nn.parallel.DistributedDataParallel) -> Bench:
        device = self.device if self.device is not None else torch.device("cpu")
        bucket = int(model.bucket_bytes_cap)  # the size DDP reduces its gradients in
        return collectives.process_group(device, ("all_reduce",), bucket, "DDP's bucket_bytes_cap (bucket_cap_mb)")

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> DDPBackend:
    """The backend of a joined process group."""
    joined = join(run, place, device_type, share_gpu)
    return DDPBackend(place, device_type, share_gpu, run.training.compression, *joined)
