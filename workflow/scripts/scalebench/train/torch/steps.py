"""PyTorch's steps (train/interfaces.py Steps): the training step on the distributed model,
evaluation on a whole model, and predictions.

The backend (native.py: DDP; fsdp.py; dp.py: DataParallel; horovod.py) reduces inside
backward() or in gradients_reduced(); loop.py does the timing, records, evaluation cadence
and checkpoint cadence.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from scalebench import architecture
from scalebench.settings import RunSettings
from scalebench.train.accumulation import Part
from scalebench.train.faults import EpochDelays
from scalebench.train.interfaces import Backend
from scalebench.train.step_timing import StepTimes
from scalebench.train.torch import compiled, data, step_timing
from scalebench.train.torch.model import Distributed, UNet
from scalebench.train.torch.runtime import LAYOUT, Device, Numerics


class Steps:
    """One rank's steps; the epoch's loss sum and replica batches accumulate on the device."""

    def __init__(
        self,
        run: RunSettings,
        distributed: Distributed,
        device: Device,
        numerics: Numerics,
        backend: Backend,
        marks: step_timing.StepMarks | None,
        delays: EpochDelays,
    ) -> None:
        self.run, self.distributed, self.backend = run, distributed, backend
        self.device, self.autocast = device.device, numerics.autocast
        self.marks, self.delays = marks, delays  # training.step_split's marks; the test faults' delays
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.replica_batches = 0
        self.output_dtype: torch.dtype | None = None  # the model's output in the last training step
        self.gathered: torch.nn.Module | None = None  # a whole copy of a sharded model (whole_model)

    def start_epoch(self, epoch: int, learning_rate: float) -> None:
        self.delays.start_epoch(epoch)
        if self.marks is not None:
            self.marks.start_epoch()
        for group in self.distributed.optimizer.param_groups:
            group["lr"] = learning_rate
        self.distributed.network.train()
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.replica_batches = 0

    def train(self, batch, part: Part) -> None:
        marks, optimizer, scaler = self.marks, self.distributed.optimizer, self.distributed.scaler
        if marks is not None:
            marks.begin()
        if self.delays.now.compute_s:  # slow_compute (faults.py): this rank is a straggler
            time.sleep(self.delays.now.compute_s)
        images, masks = batch  # on the device, converted (data.py)
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
            logits = self.distributed.network(images)
        self.output_dtype = logits.dtype  # what the passes computed in (observed.py): no device sync
        loss = F.binary_cross_entropy_with_logits(logits.float(), masks)
        if part.first:
            optimizer.zero_grad()  # set_to_none is the default; Horovod takes no argument
        # backward() adds to the gradients: divided by the step's batch count, they sum to its mean
        scaled = scaler.scale(loss / part.count)
        if marks is not None or self.delays_reduction_at_compute_end():
            step_timing.at_compute_end(scaled, self.compute_end)
        scaled.backward()
        if part.last:
            with self.backend.gradients_reduced(optimizer):  # a float16 scaler unscales them in step()
                if self.delays.now.comm_s:
                    # slow_comm (faults.py): the reduction ends this much later. After it, not at the
                    # compute's end, where Horovod's reductions, already running, would overlap it
                    time.sleep(self.delays.now.comm_s)
                if marks is not None:
                    marks.reduced()
                scaler.step(optimizer)
            scaler.update()
        elif marks is not None:  # a batch that only accumulates: nothing to reduce
            marks.reduced()
        # the loss of a batch of several replicas (DataParallel) is their mean: each replica counts
        replicas = len(self.backend.replica_ids)
        self.loss_sum += loss.detach().double() * replicas
        self.replica_batches += replicas
        if marks is not None:
            marks.end()

    def delays_reduction_at_compute_end(self) -> bool:
        """slow_reduce for FSDP2, which reduce-scatters the last units' gradients in its final callback."""
        return self.backend.spec.shards_state and bool(self.delays.now.reduce_s)

    def compute_end(self) -> None:
        """Every gradient of the pass is computed on this rank (step_timing.at_compute_end). A late
        rank's delay sits before the mark (its own compute); a slow reduction's after the reduction,
        before the mark that it ended (exposed communication on every rank, faults.py)."""
        if self.delays_reduction_at_compute_end():
            time.sleep(self.delays.now.reduce_s)
        if self.marks is not None:
            self.marks.computed()

    def epoch_loss(self) -> tuple[float, int]:
        return self.loss_sum.item(), self.replica_batches

    def step_times(self) -> StepTimes | None:
        return self.marks.times() if self.marks is not None else None

    def observed(self) -> dict:
        dtype = str(self.output_dtype).removeprefix("torch.") if self.output_dtype is not None else None
        return {"compute_dtype": dtype, "compiled": compiled.observed()}

    def optimizer_lr(self) -> float:
        return float(self.distributed.optimizer.param_groups[0]["lr"])  # every group is set alike (start_epoch)

    # --- evaluation and predictions

    def sync_buffers(self) -> None:
        self.backend.broadcast_from_root([buffer.data for buffer in self.distributed.raw.buffers()])

    def whole_model(self) -> torch.nn.Module:
        """The model with all its parameters in this process, for evaluation. Where the backend
        shards them (FSDP), a plain copy gathered from the shards: a collective every rank joins,
        after which each rank evaluates its own shard of the test set without the others."""
        raw = self.distributed.raw
        if not self.backend.spec.shards_state:
            return raw
        state = self.backend.gather_state(raw.state_dict())
        if self.gathered is None:
            with torch.device("meta"):  # no initialisation: no draw from the generators a checkpoint holds
                copy = UNet(self.run.training.batch_norm, architecture.channels(self.run.model_width))
            self.gathered = copy.to_empty(device=self.device).to(memory_format=LAYOUT)
        self.gathered.load_state_dict(state)
        return self.gathered

    def evaluate(self, batches: Iterable) -> np.ndarray:
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)  # loss, pixels, intersection, union
        model = self.whole_model()
        model.eval()
        with torch.no_grad():
            for images, masks in batches:
                with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
                    logits = model(images)
                logits = logits.float()
                predicted, truth = logits > 0, masks > 0.5
                sums += torch.stack(
                    [
                        F.binary_cross_entropy_with_logits(logits, masks, reduction="sum").double(),
                        torch.tensor(float(masks.numel()), dtype=torch.float64, device=self.device),
                        (predicted & truth).sum().double(),
                        (predicted | truth).sum().double(),
                    ]
                )
        model.train()
        return sums.cpu().numpy()

    def save_predictions(self, indices: list[int], folder: Path) -> None:
        from PIL import Image

        # rank 0 alone: a sharded model predicts with the copy the final evaluation gathered
        model = self.gathered if self.backend.spec.shards_state else self.distributed.raw
        if model is None:
            raise RuntimeError("predictions of a sharded model need the copy an evaluation gathers first")
        model.eval()
        batches = data.host_eval_batches(self.run.data_dir, indices, 1, self.device)
        with torch.no_grad():
            for index, (image, _) in zip(indices, batches):
                logits = model(image)
                mask = (logits[0, 0] > 0).to(torch.uint8).mul(255).cpu().numpy()
                Image.fromarray(mask).save(folder / f"test_{index:05d}.png")
