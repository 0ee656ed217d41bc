"""The learning-rate rule, shared by every framework and backend."""

from __future__ import annotations

import math

from scalebench.settings import TrainingSettings


def scaled_lr(training: TrainingSettings, replicas: int) -> float:
    """Base learning rate scaled for the replicas (linear, sqrt or none) in weak scaling; in
    strong scaling the global batch, and so the rate, is the same at every GPU count."""
    if training.scaling == "strong":
        return training.base_lr
    factor = {"linear": replicas, "sqrt": math.sqrt(replicas), "none": 1}[training.lr_scaling]
    return training.base_lr * factor


def learning_rate(epoch: int, training: TrainingSettings, replicas: int) -> float:
    """Rate for a 0-based epoch: linear warm-up from base_lr to the scaled rate, then step decay."""
    target = scaled_lr(training, replicas)
    warmup = training.warmup_epochs
    if epoch < warmup:
        base = training.base_lr
        return base + (target - base) * (epoch + 1) / warmup
    if training.decay_every:
        target *= training.decay_factor ** ((epoch - warmup) // training.decay_every)
    return target
