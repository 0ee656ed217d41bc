"""Horovod for PyTorch (Gloo controller here; NCCL allreduce when built with it)."""

from __future__ import annotations

import os

import torch
from torch import nn

from .horovod_srun import adopt_srun_rank

INSTALL_HINT = "run ./install.sh (it builds Horovod with PyTorch and TensorFlow support)"


def _import_horovod():
    try:
        import horovod.torch as hvd
    except ImportError as error:
        raise RuntimeError(f"backend horovod: cannot import horovod.torch ({error}); {INSTALL_HINT}") from error
    if not hvd.gloo_built() and not hvd.mpi_built():
        raise RuntimeError(f"backend horovod: Horovod was built without Gloo or MPI; {INSTALL_HINT}")
    return hvd


def dense_view(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous view of `tensor` sharing its memory.

    Horovod takes only contiguous tensors, and the model trains channels-last
    (torch_training.LAYOUT), so 4-D weights, their gradients and Adam's moments are
    NCHW tensors laid out as NHWC. Their NHWC permutation is contiguous; reducing or
    broadcasting it is the same elementwise operation on the same memory.
    """
    if tensor.is_contiguous():
        return tensor
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor.permute(0, 2, 3, 1)
    raise ValueError(f"cannot hand Horovod a tensor with strides {tensor.stride()} and shape {tuple(tensor.shape)}")


class DenseLayout:
    """A Horovod compression that hands over dense_view()s and puts the layout back after the reduction."""

    def __init__(self, inner) -> None:
        self.inner = inner  # hvd.Compression.none or .fp16

    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        view = dense_view(tensor)
        compressed, context = self.inner.compress(view)
        return compressed, (context, view is not tensor)

    def decompress(self, tensor: torch.Tensor, context: tuple) -> torch.Tensor:
        inner_context, permuted = context
        tensor = self.inner.decompress(tensor, inner_context)
        return tensor.permute(0, 3, 1, 2) if permuted else tensor


class HorovodTorchBackend:
    name = "horovod"

    def __init__(self, compression_fp16: bool = False, backward_passes_per_step: int = 1) -> None:
        self.hvd = _import_horovod()
        self.compression = DenseLayout(self.hvd.Compression.fp16 if compression_fp16 else self.hvd.Compression.none)
        self.backward_passes_per_step = backward_passes_per_step

    def setup(self, timeout_s: float) -> None:
        # A rank that waits longer than this for a dead or hung peer fails instead of hanging.
        os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, int(timeout_s)))
        adopt_srun_rank()  # started by horovod_srun.py: take the rank from srun
        self.hvd.init()
        self.rank, self.local_rank = self.hvd.rank(), self.hvd.local_rank()
        self.world_size, self.local_world_size = self.hvd.size(), self.hvd.local_size()
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        print(
            f"rank {self.rank}/{self.world_size}: horovod (gloo={self.hvd.gloo_enabled()}, "
            f"mpi={self.hvd.mpi_enabled()}, nccl={self.hvd.nccl_built()})",
            flush=True,
        )

    def wrap_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        return self.hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=self.compression,
            backward_passes_per_step=self.backward_passes_per_step,
            op=self.hvd.Average,
        )

    def broadcast_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        tensors = list(model.state_dict().items())
        # Only a resumed optimizer has state to share (its tensors, in place). Not Horovod's
        # broadcast_optimizer_state: on an empty optimizer it first takes a zero-gradient step,
        # which advances Adam's step count and makes the run differ from DDP's, and it refuses
        # channels-last moments.
        for index, state in enumerate(optimizer.state.values()):
            tensors += [
                (f"optimizer.{index}.{key}", value) for key, value in sorted(state.items()) if torch.is_tensor(value)
            ]
        self.hvd.broadcast_parameters([(name, dense_view(tensor)) for name, tensor in tensors], root_rank=0)

    def broadcast_buffers(self, model: nn.Module) -> None:
        for name, buffer in model.named_buffers():
            buffer.data.copy_(self.hvd.broadcast(buffer.data, root_rank=0, name=f"buffer.{name}"))

    def allreduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.hvd.allreduce(tensor, op=self.hvd.Sum)

    def allreduce_max(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.hvd.allreduce(tensor, op=self.hvd.Max)

    def allgather_object(self, obj: object) -> list:
        return self.hvd.allgather_object(obj)

    def versions(self) -> dict:
        import horovod

        return {"horovod": horovod.__version__, "distributed": "horovod"}

    def shutdown(self) -> None:
        self.hvd.shutdown()


def create(training: dict) -> HorovodTorchBackend:
    options = training["horovod"]
    return HorovodTorchBackend(options["fp16_compression"], options["backward_passes_per_step"])
