"""How the figures a cell records are defined, once for the ranks that record them and the
analysis that reads them back (or fills them in for a cell that predates a field)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


def node_set(record: Mapping) -> tuple[str, ...] | None:
    """The nodes an epoch record's ranks ran on (its per-rank rows' hosts, sorted), None where it
    names none (an epoch without the step split's rows, an older record)."""
    hosts = sorted({str(rank.get("host")) for rank in record.get("ranks") or () if rank.get("host")})
    return tuple(hosts) or None


@dataclass(frozen=True)
class Placement:
    """Where a cell's epochs ran: the node sets in the order they first appear, each epoch's set (an
    index into `sets`, None where its record names none), and the set whose epochs give the steady
    figures (`kept`, None with fewer than two sets). A requeued or retried job may resume on other
    nodes: epochs of two allocations are two measurements, never one median."""

    sets: tuple[tuple[str, ...], ...]
    per_epoch: tuple[int | None, ...]
    kept: int | None
    kept_steady: int = 0  # the kept set's steady epochs

    def note(self, numbers: list) -> str | None:
        """runs.csv's node_sets_note: which epochs ran where and which give the steady figures
        (`numbers`: the epochs' numbers); None on one set."""
        if self.kept is None:
            return None
        parts = []
        for index, nodes in enumerate(self.sets):
            own = [numbers[i] for i, where in enumerate(self.per_epoch) if where == index]
            parts.append(f"epochs {epoch_ranges(own)} on {','.join(nodes)}")
        kept = ",".join(self.sets[self.kept])
        if self.kept_steady:
            chosen = f"the steady figures from {kept}'s {self.kept_steady} steady epoch{'s' * (self.kept_steady > 1)}"
        else:
            chosen = f"the steady figures from {kept}'s epochs after the first, none of them steady on its own"
        return f"{'; '.join(parts)}: {chosen} (the most; a tie goes to the later nodes)"


def epoch_ranges(numbers: list) -> str:
    """'1-2, 5' of sorted epoch numbers."""
    runs: list[list] = []
    for number in numbers:
        if runs and isinstance(number, int) and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)


def placement(epochs: list[Mapping]) -> Placement:
    """The Placement of a cell's epoch records, in epoch order."""
    sets: list[tuple[str, ...]] = []
    per_epoch: list[int | None] = []
    for record in epochs:
        nodes = node_set(record)
        if nodes is not None and nodes not in sets:
            sets.append(nodes)
        per_epoch.append(sets.index(nodes) if nodes is not None else None)
    if len(sets) < 2:
        return Placement(tuple(sets), tuple(per_epoch), None)
    # steady on its own: after the first, neither profiled nor resumed (without steady_indices' fallback)
    steady = {i for i, record in enumerate(epochs) if i and not unsteady(record)}
    counts = [
        sum(1 for i, where in enumerate(per_epoch) if where == index and i in steady) for index in range(len(sets))
    ]
    kept = max(range(len(sets)), key=lambda index: (counts[index], index))
    return Placement(tuple(sets), tuple(per_epoch), kept, counts[kept])


def steady_flags(epochs: list[Mapping]) -> list[bool]:
    """Per epoch record, whether it stays out of the steady figures (steady_indices' `profiled`): a
    profiled or resumed epoch (`unsteady`), and on a cell whose epochs ran on several node sets every
    epoch of the sets not kept (Placement). Where the kept set has no steady epoch of its own (its
    only later epoch resumed), its epochs after the first count, so that one set's epochs still give
    the figures."""
    flags = [unsteady(record) for record in epochs]
    placed = placement(epochs)
    if placed.kept is None:
        return flags
    elsewhere = [where is not None and where != placed.kept for where in placed.per_epoch]
    if not placed.kept_steady:
        return elsewhere
    return [flag or apart for flag, apart in zip(flags, elsewhere, strict=True)]


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
