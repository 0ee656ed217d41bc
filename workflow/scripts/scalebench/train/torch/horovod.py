"""Horovod for PyTorch (Gloo controller here; NCCL allreduce when built with it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from scalebench.refusal import HorovodBuildError
from scalebench.settings import RunSettings
from scalebench.train.collectives import Bench
from scalebench.train.horovod_common import INSTALL_HINT, HorovodBackend, fusion_threshold
from scalebench.train.rank_env import RankInfo
from scalebench.train.torch import collectives


def _import_horovod():
    try:
        import horovod.torch as hvd
    except ImportError as error:
        raise HorovodBuildError(f"backend horovod: cannot import horovod.torch ({error}); {INSTALL_HINT}") from error
    return hvd


def dense_view(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous view of `tensor` sharing its memory.

    Horovod takes only contiguous tensors, and the model trains channels-last
    (runtime.LAYOUT), so 4-D weights, their gradients and Adam's moments are
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


class HorovodTorchBackend(HorovodBackend):
    framework = "torch"

    library = staticmethod(_import_horovod)

    def handed_over(self, compression) -> DenseLayout:
        return DenseLayout(compression)

    def distribute(self, model: nn.Module, optimizer: torch.optim.Optimizer, marks=None) -> tuple:
        # backward_passes_per_step: each gradient's allreduce starts in the backward pass that
        # completes its step's batches; a shorter last step of an epoch has the rest of its
        # allreduces started by synchronize() (the framework divides each batch's loss by the
        # step's batch count, so the reduced gradient is the step's mean)
        restored = optimizer.state_dict()
        optimizer = self.hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=self.compression,
            backward_passes_per_step=self.backward_passes_per_step,
            op=self.hvd.Average,
        )
        # Horovod builds a new optimizer over the same parameter groups, without the state a
        # checkpoint restored (Adam's moments and step count): a resumed run would restart them
        optimizer.load_state_dict(restored)
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
        return model, optimizer

    @contextmanager
    def gradients_reduced(self, optimizer) -> Iterator[None]:
        # Horovod's pattern for a loss scaler: wait for the allreduces backward() started, then
        # step without synchronising again (the scaler must not unscale gradients in flight).
        optimizer.synchronize()
        with optimizer.skip_synchronize():
            yield

    def broadcast_from_root(self, tensors: list) -> None:
        for index, tensor in enumerate(tensors):
            tensor.copy_(self.hvd.broadcast(tensor, root_rank=0, name=f"buffer.{index}"))

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(torch.as_tensor(np.asarray(values, dtype=np.float64)), op=self.hvd.Sum).numpy()

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(torch.as_tensor(np.asarray(values, dtype=np.float64)), op=self.hvd.Max).numpy()

    def collective_bench(self, model: nn.Module) -> Bench:
        device = (
            torch.device("cuda", torch.cuda.current_device()) if self.device_type == "cuda" else torch.device("cpu")
        )
        return collectives.horovod(self.hvd, device, self.collective_library(), *fusion_threshold())


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> HorovodTorchBackend:
    """The backend once hvd.init() has joined the ranks."""
    return HorovodTorchBackend.joined(run, place, device_type, share_gpu)
