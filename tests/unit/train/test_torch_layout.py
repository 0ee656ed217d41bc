"""Channels-last training: what Horovod receives is contiguous and shares the gradient's memory."""

from __future__ import annotations

import pytest
import torch
from conftest import training_settings
from scalebench.train.torch import horovod as torch_horovod
from scalebench.train.torch import runtime as torch_runtime
from scalebench.train.torch.model import UNet

ENVIRONMENT = "torch"

compression = pytest.importorskip("horovod.torch.compression", reason="Horovod is built by ./install.sh")


def channels_last_gradients() -> list[torch.Tensor]:
    model = UNet().to(memory_format=torch_runtime.LAYOUT)
    images = torch.rand(2, 1, 32, 32).contiguous(memory_format=torch_runtime.LAYOUT)
    model(images).sum().backward()
    return [p.grad for p in model.parameters()]


def test_channels_last_weights_give_channels_last_gradients():
    grads = channels_last_gradients()
    weights = [g for g in grads if g.dim() == 4]
    assert all(g.is_contiguous(memory_format=torch.channels_last) for g in weights)
    # Most are not contiguous in PyTorch's sense, which Horovod requires (one input channel or a
    # 1x1 kernel make both layouts the same).
    assert sum(not g.is_contiguous() for g in weights) >= len(weights) - 2


def test_dense_view_is_contiguous_and_shares_memory():
    for grad in channels_last_gradients():
        view = torch_horovod.dense_view(grad)
        assert view.is_contiguous() and view.data_ptr() == grad.data_ptr() and view.numel() == grad.numel()
        view.mul_(2)  # what an in-place allreduce does to it
        assert torch.equal(view.sum(), grad.sum())


@pytest.mark.parametrize("inner", [compression.Compression.none, compression.Compression.fp16])
def test_compression_round_trip_restores_shape_and_layout(inner):
    layout = torch_horovod.DenseLayout(inner)
    for grad in channels_last_gradients():
        sent, context = layout.compress(grad)
        assert sent.is_contiguous()
        back = layout.decompress(sent, context)
        assert back.shape == grad.shape and back.stride() == grad.stride() and back.dtype == grad.dtype
        torch.testing.assert_close(back, grad, rtol=1e-3, atol=1e-3)


def test_a_tensor_of_another_layout_is_refused():
    with pytest.raises(ValueError, match="cannot hand Horovod a tensor"):
        torch_horovod.dense_view(torch.rand(4, 3).t())


def test_horovod_steps_after_its_allreduces_finished_and_without_a_second_synchronisation():
    # Horovod's documented pattern for a GradScaler: synchronize(), then step inside
    # skip_synchronize(), so the scaler never unscales gradients whose allreduce is in flight.
    from contextlib import contextmanager

    from scalebench.train import rank_env

    calls = []

    class Recorder:  # the two methods of hvd.DistributedOptimizer the pattern uses
        def synchronize(self):
            calls.append("synchronize")

        @contextmanager
        def skip_synchronize(self):
            calls.append("skip on")
            yield
            calls.append("skip off")

    backend = torch_horovod.HorovodTorchBackend(rank_env.detect({}), training_settings().horovod)
    with backend.gradients_reduced(Recorder()):
        calls.append("scaler.step")
    assert calls == ["synchronize", "skip on", "scaler.step", "skip off"]
