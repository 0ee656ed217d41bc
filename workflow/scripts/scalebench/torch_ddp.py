"""PyTorch DistributedDataParallel: Gloo on CPU, NCCL on GPU."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from . import distenv


class DDPBackend:
    name = "native"

    def __init__(self) -> None:
        info = distenv.detect()
        self.info = info
        self.rank, self.local_rank = info.rank, info.local_rank
        self.world_size, self.local_world_size = info.world_size, info.local_world_size

    def setup(self, timeout_s: float) -> None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(
            backend,
            init_method=f"tcp://{self.info.master_addr}:{self.info.master_port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self.device = (
            torch.device("cuda", self.local_rank % torch.cuda.device_count())
            if backend == "nccl"
            else torch.device("cpu")
        )
        print(
            f"rank {self.rank}/{self.world_size}: process group {backend} via {self.info.launcher} "
            f"at {self.info.master_addr}:{self.info.master_port}",
            flush=True,
        )

    def wrap_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        device_ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        return optimizer  # DDP averages gradients in backward()

    def broadcast_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        pass  # DDP broadcasts rank 0's parameters and buffers when it wraps the model

    def broadcast_buffers(self, model: nn.Module) -> None:
        for buffer in model.buffers():
            dist.broadcast(buffer.data, src=0)

    def allreduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def allreduce_max(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor

    def allgather_object(self, obj: object) -> list:
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def versions(self) -> dict:
        return {"distributed": f"torch.distributed {dist.get_backend()}"}

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def create(training: dict) -> DDPBackend:
    return DDPBackend()
