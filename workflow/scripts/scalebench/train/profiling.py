"""training.profile: trace the first K steps of epoch E on every rank, into the cell's profile/ folder.

The loop wraps each epoch's steps in `Window.around(epoch)`, a context manager. The framework's
profiler (its spec's start_trace, train/<framework>/profiler.py: torch.profiler, TensorFlow's
profiler) and the backend's own trace (Backend.start_timeline: Horovod's timeline) run for the
window only. A trace
that cannot be started or written (a full disk, a folder that cannot be made) never fails the
cell: the epoch's record says the trace is missing and why, and training goes on. The profiled
epoch is marked in its record (``profiled``) and left out of the steady-state figures
(measures.steady_epochs), since a profiler slows the steps it traces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from scalebench.settings import ProfileSettings

FOLDER = "profile"  # in the cell's folder


class NotTraced(Exception):
    """This rank does not trace, and why (a framework's start_trace raises it)."""


class Trace(Protocol):
    """A framework's profiler, started when built (train/interfaces.py Trace)."""

    def stop(self) -> None: ...


class Timeline(Protocol):
    """What the window asks of the backend (train/interfaces.py Backend): its own trace, and the
    ranks' texts gathered."""

    def start_timeline(self, folder: Path) -> None: ...

    def stop_timeline(self) -> None: ...

    def allgather_text(self, text: str) -> list[str]: ...


class Window:
    """The profile window of one rank, and what became of its trace. `start_trace(folder)` starts
    the framework's profiler (its spec's, for this rank's device and backend)."""

    def __init__(
        self, profile: ProfileSettings | None, out: Path, start_trace: Callable[[Path], Trace], backend: Timeline
    ) -> None:
        self.profile, self.folder = profile, Path(out) / FOLDER
        self.start_trace, self.backend = start_trace, backend
        self.active = self.timeline = self.written = False
        self.trace: Trace | None = None  # the framework's, while the window is open
        self.problems: list[str] = []

    def covers(self, epoch: int) -> bool:
        """Whether 0-based `epoch` is the profiled one."""
        return self.profile is not None and self.profile.epoch == epoch + 1

    def start(self, epoch: int) -> None:
        """Before the epoch's first step, if it is the profiled one."""
        if not self.covers(epoch):
            return
        self.problems, self.written = [], False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.trace = self.start_trace(self.folder)
        except NotTraced as reason:
            self.problems.append(f"not traced: {reason}")
            return
        except Exception as error:  # noqa: BLE001 - a trace is never worth the cell
            self.problems.append(f"the profiler could not start: {type(error).__name__}: {error}")
            return
        self.active = True
        try:
            self.backend.start_timeline(self.folder)
        except Exception as error:  # noqa: BLE001
            self.problems.append(f"the backend's timeline could not start: {type(error).__name__}: {error}")
            self.timeline = False
        else:
            self.timeline = True

    @contextmanager
    def around(self, epoch: int) -> Iterator[Window]:
        """The window around one epoch's steps: opened before the first step where `epoch` is the
        profiled one, closed after its K-th step (after_step) or, at the latest, when the steps end
        (a window longer than the epoch: config checks refuse it where they can). An epoch that
        raises leaves it open: the cell is ending, and writing a trace (or Horovod's timeline,
        which every rank joins) must not hold up its error."""
        self.start(epoch)
        yield self
        self.stop()

    def after_step(self, steps_done: int) -> None:
        """After each step: the window closes after its K-th."""
        if self.active and steps_done >= self.profile.steps:
            self.stop()

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        trace, self.trace = self.trace, None
        try:
            trace.stop()
            self.written = True
        except Exception as error:  # noqa: BLE001
            self.problems.append(f"the trace could not be written: {type(error).__name__}: {error}")
        if self.timeline:
            try:
                self.backend.stop_timeline()
            except Exception as error:  # noqa: BLE001
                self.problems.append(f"the backend's timeline could not be written: {type(error).__name__}: {error}")

    def fields(self, epoch: int) -> dict:
        """The epoch record's profile fields (empty outside the window); in the profiled epoch a
        collective every rank joins: the folder where any rank's trace was written, and each
        rank's missing trace (or timeline) with its reason."""
        if not self.covers(epoch):
            return {"profiled": False, "profile_trace": None, "profile_reason": None}
        mine = f"{int(self.written)}{'; '.join(self.problems)}"
        gathered = self.backend.allgather_text(mine)
        reason = "; ".join(f"rank {rank}: {text[1:]}" for rank, text in enumerate(gathered) if text[1:])
        written = any(text[:1] == "1" for text in gathered)
        return {"profiled": True, "profile_trace": FOLDER if written else None, "profile_reason": reason or None}
