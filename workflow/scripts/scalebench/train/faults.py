"""Test hooks, set through SCALEBENCH_FAULT (several separated by commas). The rank's entry
(entry.py) reads the variable once into a FaultPlan, which the loop, the collective benchmark and
the builders are handed (no code below the entry reads it); the loop calls its check() before each
epoch's first step. FaultPlan() names none.

- ``oom:RANK:EPOCH``: rank RANK raises its framework's out-of-memory error in epoch EPOCH.
- ``stall:EPOCH``: a run that did not resume blocks at the start of epoch EPOCH, so it
  outlasts any time limit however fast the machine is (its retry resumes and goes on).
- ``stall_rank:RANK:EPOCH``: the same for rank RANK only (a cell without that rank runs on);
  the other ranks wait for it in their first collective of the epoch.
- ``meet:FOLDER:COUNT``: rank 0 of each cell waits before its first epoch until COUNT
  cells have arrived in FOLDER (cells that must run at the same time); fails after 300 s.
- ``hide_checkpoint:RANK``: rank RANK looks for the cell's checkpoint in an empty folder,
  as a rank on a node that does not see the cell's folder would (checkpoint_folder).
- ``lr:EPOCH:FACTOR``: in epoch EPOCH the optimizer is handed FACTOR times the schedule's rate,
  as a broken wiring would hand it another (learning_rate); the rate read back from it then
  differs (observed.py).
- ``collectives_fail:RANK``: rank RANK fails to prepare the collective benchmark's first
  all-reduce (collective_failure), as a rank out of memory for its buffers would.
- ``precision_off``: the steps run without autocast (PyTorch) or the Keras mixed-precision
  policy (TensorFlow), whatever training.precision asks (precision_off), as a broken wiring
  would; the dtype observed in the first step then differs (observed.py).
- ``disk_full:EPOCH:BYTES``: in a run that did not resume, rank 0 may write no file larger than
  BYTES from the start of epoch EPOCH (RLIMIT_FSIZE: a write beyond it fails with EFBIG), as a
  full quota would; the retry resumes with the space back.

Known delays, which the step split must find (docs/step-split.md), each in epoch EPOCH only:

- ``slow_reduce:RANK:SECONDS:EPOCH``: rank RANK hands its gradients to the reduction SECONDS late
  in every step; the other ranks wait for it inside their reduction. The delayed rank has not
  finished its gradients yet, so its own split counts the delay as compute in both frameworks
  (PyTorch: a hook before the last gradient reaches the backend's hooks, or, FSDP, before its
  final reduce-scatters; TensorFlow: in the step, before the mark that the gradients are
  computed); its peers count it as exposed communication, and the loss waterfall, which reads
  the critical rank, as imbalance.
- ``slow_comm:SECONDS:EPOCH``: every rank's reduction takes SECONDS longer in every step, as a
  slow network would make it: a sleep between the mark that the gradients are computed and the
  one that the reduced gradients are ready, on every rank (exposed communication everywhere). In
  PyTorch it follows the reduction (Horovod's, already running when the last gradient is computed,
  would overlap a sleep before it: a loaded machine's slower reduction then hid part of the delay).
- ``slow_loader:SECONDS:EPOCH``: every rank's loader hands over each batch SECONDS late.
- ``slow_compute:RANK:SECONDS:EPOCH``: rank RANK computes SECONDS longer in every step (a
  straggler: a busy core, a throttled GPU).

And one in every epoch, which the host analysis must find (analysis/hosts.py):

- ``slow_host:NAME:SECONDS``: every rank on node NAME (its name as the records give it:
  SLURM's node name, else the hostname; provenance.host_name) computes SECONDS longer in every
  step of every epoch, as on a node with a throttled GPU or a noisy neighbour.

And one for the verdicts and the rounds of matrix.seeds (analysis/rounds.py), in every epoch:

- ``slow_cell:PATTERN:SECONDS``: every rank of a cell whose path (``torch/dp/g1/s2``) matches the
  shell pattern PATTERN (``*/dp/*``: one backend's cells; ``*/s1``: every cell of seed 1) computes
  SECONDS longer in every step of every epoch, as a backend with a slower step would; several
  entries add up, and the other cells of the same run are untouched.
"""

from __future__ import annotations

import fnmatch
import os
import resource
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from scalebench.train.provenance import host_name

VARIABLE = "SCALEBENCH_FAULT"
MEET_TIMEOUT_S = 300
DELAY_KINDS = ("slow_reduce", "slow_comm", "slow_loader", "slow_compute")


@dataclass(frozen=True)
class FaultPlan:
    """The faults SCALEBENCH_FAULT names, read once where the rank starts (entry.py) and handed to
    the loop, the collective benchmark and the builders: `entries` holds each (kind, argument) in
    the variable's order, `host` this rank's node, which slow_host's NAME matches. FaultPlan() names
    none: every method then leaves the run as it is."""

    entries: tuple[tuple[str, str], ...] = ()
    host: str = ""

    @classmethod
    def parse(cls, text: str, host: str = "") -> FaultPlan:
        """The plan of SCALEBENCH_FAULT's value `text` (entries separated by commas, empty ones skipped)."""
        entries = [entry for entry in text.split(",") if entry]
        return cls(tuple((kind, argument) for kind, _, argument in (entry.partition(":") for entry in entries)), host)

    @classmethod
    def of_rank(cls, env: Mapping[str, str]) -> FaultPlan:
        """This rank's plan, from the variables its launcher gave it, on the node it runs on."""
        return cls.parse(env.get(VARIABLE, ""), host_name())

    def check(self, rank: int, epoch: int, resumed: bool, out_of_memory: Callable[[str], BaseException]) -> None:
        """Apply the hooks, if any, at the start of 0-based `epoch`."""
        for kind, argument in self.entries:
            fault = f"{kind}:{argument}"
            if kind == "oom":
                fault_rank, fault_epoch = argument.split(":")
                if int(fault_rank) == rank and int(fault_epoch) == epoch + 1:
                    raise out_of_memory(f"out of memory (injected by SCALEBENCH_FAULT={fault})")
            elif kind == "stall" and not resumed and int(argument) == epoch + 1:
                stall(epoch, fault)
            elif kind == "stall_rank" and not resumed and argument == f"{rank}:{epoch + 1}":
                stall(epoch, fault)
            elif kind == "meet" and epoch == 0 and rank == 0:
                folder, count = argument.rsplit(":", 1)
                meet(Path(folder), int(count), fault)
            elif kind == "disk_full" and rank == 0 and not resumed:
                fault_epoch, size = argument.split(":")
                if int(fault_epoch) == epoch + 1:
                    print(f"files of rank 0 limited to {int(size)} bytes (SCALEBENCH_FAULT={fault})", flush=True)
                    limit = (int(size), resource.getrlimit(resource.RLIMIT_FSIZE)[1])
                    resource.setrlimit(resource.RLIMIT_FSIZE, limit)

    def delays(self, rank: int, epoch: int, cell: str = "") -> Delays:
        """The delays for `rank` of the cell whose path is `cell` in 0-based `epoch` (none: all 0)."""
        found = {}
        for kind, argument in self.entries:
            if kind in ("slow_loader", "slow_comm"):
                seconds, fault_epoch = argument.split(":")
                if int(fault_epoch) == epoch + 1:
                    found["loader_s" if kind == "slow_loader" else "comm_s"] = float(seconds)
            elif kind in ("slow_reduce", "slow_compute"):
                fault_rank, seconds, fault_epoch = argument.split(":")
                if int(fault_rank) == rank and int(fault_epoch) == epoch + 1:
                    found["reduce_s" if kind == "slow_reduce" else "compute_s"] = float(seconds)
            elif kind == "slow_host":
                node, seconds = argument.rsplit(":", 1)
                if node == self.host:
                    found["compute_s"] = found.get("compute_s", 0.0) + float(seconds)
            elif kind == "slow_cell":
                pattern, seconds = argument.rsplit(":", 1)
                if cell and fnmatch.fnmatchcase(cell, pattern):
                    found["compute_s"] = found.get("compute_s", 0.0) + float(seconds)
        return Delays(**found)

    def injects(self, kind: str) -> bool:
        """Whether the plan names a delay of `kind` for some rank and epoch: a compiled step gets its
        sleep only then, so a run without faults trains with exactly its own ops."""
        return any(
            name == kind or (name in ("slow_host", "slow_cell") and kind == "slow_compute") for name, _ in self.entries
        )

    def checkpoint_folder(self, rank: int, out: Path) -> Path:
        """Where this rank looks for the cell's checkpoint: `out`, unless ``hide_checkpoint`` hides it."""
        for kind, argument in self.entries:
            if kind == "hide_checkpoint" and int(argument) == rank:
                return out / ".hidden-checkpoint"  # never written: this rank sees no checkpoint
        return out

    def learning_rate(self, rate: float, epoch: int) -> float:
        """The rate the loop hands the framework in 0-based `epoch`: the schedule's, unless ``lr`` scales it."""
        for kind, argument in self.entries:
            if kind == "lr":
                fault_epoch, factor = argument.split(":")
                if int(fault_epoch) == epoch + 1:
                    rate *= float(factor)
        return rate

    def collective_failure(self, rank: int, op: str) -> None:
        """Raise where ``collectives_fail`` names this rank, while the benchmark prepares an all-reduce."""
        for kind, argument in self.entries:
            if kind == "collectives_fail" and int(argument) == rank and op == "all_reduce":
                raise RuntimeError(f"injected by SCALEBENCH_FAULT=collectives_fail:{argument}")

    def precision_off(self) -> bool:
        """Whether ``precision_off`` asks the framework to compute in float32 whatever training.precision says."""
        return self.injects("precision_off")


NO_FAULTS = FaultPlan()  # where no fault is named: a test's component, a benchmark outside a rank


@dataclass(frozen=True)
class Delays:
    """This rank's injected delays in one epoch, in seconds per step (per batch for the loader)."""

    reduce_s: float = 0.0  # slow_reduce: this rank hands its gradients to the reduction late
    comm_s: float = 0.0  # slow_comm: every rank's reduction takes longer
    compute_s: float = 0.0
    loader_s: float = 0.0


class EpochDelays:
    """This rank's delays of the epoch under way (`now`), from the rank's `plan`, which its
    framework's steps read; the steps move it on at each epoch's start (start_epoch). `cell`: the
    cell's path, which slow_cell's pattern matches."""

    def __init__(self, plan: FaultPlan, rank: int, cell: str = "") -> None:
        self.plan = plan
        self.rank = rank
        self.cell = cell
        self.now = Delays()

    def start_epoch(self, epoch: int) -> Delays:
        self.now = self.plan.delays(self.rank, epoch, self.cell)
        return self.now


def delayed(batches: Iterable, seconds: float) -> Iterator:
    """`batches`, each handed over `seconds` late (slow_loader): inside the loop's data wait."""
    for batch in batches:
        time.sleep(seconds)
        yield batch


def stall(epoch: int, fault: str) -> None:
    # one write, newline included: every rank prints this into the same pipe
    print(f"stalling at epoch {epoch + 1} (SCALEBENCH_FAULT={fault})\n", end="", flush=True)
    while True:
        time.sleep(1)


def meet(folder: Path, count: int, fault: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{os.getpid()}-{time.time_ns()}").touch()
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(list(folder.iterdir())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"SCALEBENCH_FAULT={fault}: the other cells did not arrive within {MEET_TIMEOUT_S} s")
        time.sleep(0.2)
