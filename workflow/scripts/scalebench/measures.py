"""How the figures a cell records are defined, once for the ranks that record them and the
analysis that reads them back (or fills them in for a cell that predates a field)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from scalebench import backends


def finite_number(value) -> float:
    """A finite float, or NaN for None / non-numbers / inf (never 0): how a record's missing
    figure is read."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def unsteady(record: Mapping) -> bool:
    """An epoch record left out of the steady figures besides a run's first epoch: one that traced
    steps (training.profile) or the first epoch after a resume from a checkpoint (a warm-up again,
    records' `resumed`)."""
    return bool(record.get("profiled")) or bool(record.get("resumed"))


def steady_indices(per_epoch: Iterable[float | None], profiled: Iterable[bool] | None = None) -> list[int]:
    """The indices of the steady epochs of a per-epoch figure: those after the first (warm-up,
    compilation); the only epoch if there is one; none with none. Values that are missing or not
    finite are left out. `profiled` (per epoch, `unsteady`): an epoch that traced steps is left out
    too, since a profiler slows what it traces, and the first epoch after a resume, a warm-up again
    (the first epoch counts as the warm-up whether it was flagged or not); with every later epoch
    flagged, as if none were."""
    values = [finite_number(value) for value in per_epoch]
    flags = [bool(flag) for flag in profiled] if profiled is not None else []
    if any(flags[1:]):
        steady = [i for i in range(1, len(values)) if not flags[i] and not math.isnan(values[i])]
        if steady:
            return steady
    known = [i for i, value in enumerate(values) if not math.isnan(value)]
    return known[1:] if len(known) > 1 else known


def steady_median(per_epoch: Iterable[float | None], profiled: Iterable[bool] | None = None) -> float:
    """The median of a per-epoch figure (epoch time, throughput, MFU, a step split part) over the
    steady epochs (steady_indices); NaN with none."""
    values = [finite_number(value) for value in per_epoch]
    steady = [values[i] for i in steady_indices(values, profiled)]
    return float(statistics.median(steady)) if steady else math.nan


def median_epochs(per_epoch: Iterable[float | None], profiled: Iterable[bool] | None = None) -> list[int]:
    """The steady epochs whose figure is the steady median: one (an odd count) or the two it averages.
    Parts of those epochs, averaged alike, add up to the steady median of their sum exactly, which
    medians of the parts would not."""
    values = [finite_number(value) for value in per_epoch]
    steady = sorted(steady_indices(values, profiled), key=lambda i: (values[i], i))
    if not steady:
        return []
    middle = len(steady) // 2
    return steady[middle : middle + 1] if len(steady) % 2 else steady[middle - 1 : middle + 1]


def backward_passes(framework: str, backend: str, training: Mapping) -> int:
    """Batches per optimizer step: training.horovod.backward_passes_per_step for a backend that
    accumulates gradients before reducing them, else 1."""
    if not backends.spec(framework, backend).accumulates:  # its settings need not name the option
        return 1
    return backends.backward_passes(framework, backend, int(training["horovod"]["backward_passes_per_step"]))


def images_per_step(batch_per_gpu: int, replicas: int, passes: int) -> int:
    """The global batch: images per optimizer step over all replicas."""
    return batch_per_gpu * replicas * passes


def batches_per_epoch(
    samples: int, replicas: int, batch: int, steps_per_epoch: int | None = None, passes: int = 1
) -> int:
    """Full batches each replica trains on in an epoch: with training.steps_per_epoch, its
    optimizer steps' batches; else both frameworks' samplers pad the shards to
    ceil(samples / replicas) and drop the incomplete last batch."""
    if steps_per_epoch is not None:
        return steps_per_epoch * passes
    return math.ceil(samples / replicas) // batch


def cell_energy(epoch_joules: list[float | None], last_reason: str) -> tuple[float | None, str]:
    """The cell's energy over its epochs: their sum where every epoch was measured (epochs of a
    run resumed from a checkpoint written before energy was recorded were not), else None."""
    if not epoch_joules:
        return None, "no epoch completed"
    unknown = sum(joules is None for joules in epoch_joules)
    if not unknown:
        return float(sum(epoch_joules)), ""
    return None, last_reason or f"{unknown} of {len(epoch_joules)} epochs were not measured"


def gpu_hours(gpus: int, seconds: float) -> float:
    """GPUs x `seconds`, in hours: of the job's wall, what a cell cost (gpu_hours); of the training
    time (the epochs' summed time, the slowest rank's: no setup, evaluation or checkpoints), the
    epochs' share (train_gpu_hours), the window the energy is measured over too."""
    return gpus * seconds / 3600
