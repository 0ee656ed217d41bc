"""PyTorch's marks of the step split ("the backward tail"; train/step_timing.py says what is made of them).

Per step: a when the step starts (Steps.train); b when every gradient of the backward pass is computed on
this rank; c when the backend's reduced gradients are ready for the optimizer; d when the step
ends. Exposed communication is c - b: the reduction's tail that no compute hides (Megatron's
gradient-sync timer measures the same tail).

b: the first thing a backward pass runs is the hook of the tensor it starts from (the loss);
that hook queues an autograd final callback (the engine's queue_callback). Final callbacks run
in the order they were queued, once the graph's last node has run, so ours runs before the ones
the backends queue later in the same pass: DDP's reducer queues its finalize (which waits for
the buckets' allreduces) when the last bucket is ready, FSDP2's root queues its post-backward
(the last reduce-scatters and their wait) from a hook on the model's output. A test checks the
order. DataParallel reduces inside the graph (the backward of its broadcast), so there b is
taken earlier, when every replica's parameters have their gradients (a multi-grad hook).

c: when backward() returns (DDP, FSDP, DataParallel), or once Horovod's synchronize() has
waited for its allreduces (Backend.gradients_reduced).

On a CPU rank the marks are perf_counter() readings (the autograd engine runs the pass on this
thread). On a GPU they are CUDA events recorded on the current stream and read only at the
epoch's end: a synchronisation per step would serialise the overlap it should measure, and a
host clock in a hook would measure a launch, not the work (the traps DeepSpeed's comms logger
and HTA describe).

Total communication, where the backend can time it on a CPU rank: DDP through a communication
hook that reduces each bucket exactly as DDP's own path does (each gradient times 1/N into the
bucket, then a sum allreduce; the fp16 hook as it is) and notes when each allreduce was started
and when its future completed; FSDP2 through its custom collectives (the default ones, timed).
Collectives that block a CPU rank inside the pass count as exposed communication too, not as
compute: FSDP2's all-gathers and reduce-scatters (Gloo runs them synchronously there) and DDP's
broadcast of the batch-norm buffers at the start of each forward. On a GPU these run on their own
streams: their device time is not read here (None with the reason; training.profile's trace
holds it), and the waits inside the pass (FSDP's all-gathers, DDP's buffer broadcast) count as
compute.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.autograd import Variable

from scalebench.train.interfaces import Backend
from scalebench.train.step_timing import StepTimes
from scalebench.train.torch.runtime import Device

GPU_COMM_REASON = (
    "not read on GPUs: the collectives run on their own streams, where a host timer would see only their "
    "launch (training.profile's trace shows their kernels)"
)


class CommSpans:
    """When the backend's collectives were in flight on this rank (host clock): (start, end, blocking).
    A blocking span is a collective the rank waited for inside the pass (FSDP2 on the CPU)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, bool]] = []

    def add(self, start: float, end: float, blocking: bool) -> None:
        self.spans.append((start, end, blocking))  # list.append: safe from Gloo's threads

    def clear(self) -> None:
        self.spans = []


def covered(spans: list[tuple[float, float]], low: float, high: float) -> float:
    """Seconds of [low, high] that the union of `spans` covers."""
    total, reached = 0.0, low
    for start, end in sorted(spans):
        start, end = max(start, reached), min(end, high)
        if end > start:
            total += end - start
            reached = end
    return total


class StepMarks:
    """The four marks of each step of one epoch on this rank (module docstring)."""

    def __init__(self, device: torch.device, comm_reason: str) -> None:
        self.gpu = device.type == "cuda"
        self.comm = CommSpans() if not self.gpu and not comm_reason else None
        self.comm_reason = GPU_COMM_REASON if self.gpu else comm_reason
        self.steps: list[list] = []  # this epoch's steps' marks [a, b, c, d]
        self.current: list = [None] * 4  # the step under way

    def start_epoch(self) -> None:
        self.steps = []
        self.current = [None] * 4
        if self.comm is not None:
            self.comm.clear()

    def untimed(self, reason: str) -> None:
        """The backend's collectives cannot be timed after all (`reason`): no total from here on."""
        self.comm, self.comm_reason = None, reason

    def mark(self):
        if self.gpu:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin(self) -> None:
        self.current = [self.mark(), None, None, None]

    def computed(self) -> None:
        """b; the first call of a step counts (DataParallel's own hook comes before the callback)."""
        if self.current[1] is None:
            self.current[1] = self.mark()

    def reduced(self) -> None:
        self.current[2] = self.mark()

    def end(self) -> None:
        self.current[3] = self.mark()
        self.steps.append(self.current)

    def seconds(self, start, end) -> float:
        if self.gpu:
            return start.elapsed_time(end) / 1000
        return end - start

    def times(self) -> StepTimes:
        """The epoch's steps, read after the loop's synchronisation (GPU events are complete then)."""
        step_s, exposed_s, total = [], [], 0.0
        spans = self.comm.spans if self.comm is not None else []
        for begin, computed, reduced, end in self.steps:
            computed = computed if computed is not None else reduced  # a backward without gradients
            exposed = self.seconds(computed, reduced)
            if spans:
                inside = [(s, e) for s, e, blocking in spans if blocking and s < computed]
                exposed += covered(inside, begin, computed)
                total += covered([(s, e) for s, e, _ in spans], begin, end)
            step_s.append(self.seconds(begin, end))
            exposed_s.append(exposed)
        measured = self.comm is not None and bool(spans)
        reason = "" if measured else self.comm_reason or "the backend started no timed collective in the steps"
        return StepTimes(step_s, exposed_s, total if measured else None, reason)


def at_compute_end(loss: torch.Tensor, callback: Callable[[], None]) -> None:
    """Run `callback` once the backward pass that starts from `loss` has computed every gradient,
    before the final callbacks the backends queue later in the pass (module docstring)."""

    def queue(_grad: torch.Tensor) -> None:
        Variable._execution_engine.queue_callback(callback)

    loss.register_hook(queue)


def delay_reduction(model: torch.nn.Module, seconds: Callable[[], float]) -> None:
    """slow_reduce (faults.py) for backends that reduce from gradient hooks (DDP, Horovod): the
    first parameter's gradient is the pass's last (the first convolution); a hook that runs before
    the backend's own sleeps there `seconds()`, so this rank starts its last reduction late."""
    first = next(model.parameters())

    def wait(_grad: torch.Tensor) -> None:
        delay = seconds()
        if delay:
            time.sleep(delay)

    first.register_hook(wait)


def timed_comm_hook(marks: StepMarks, inner: Callable | None, processes: int) -> Callable:
    """A DDP communication hook that reduces as DDP does without one (`inner` None: each gradient
    times 1/processes, which DDP's reducer applies as it copies it into the bucket, then a sum
    allreduce), or as `inner` does (fp16_compress_hook), noting each bucket's allreduce span."""

    def hook(state, bucket):  # no annotations: DDP checks them, and this module's would be strings
        started = time.perf_counter()
        if inner is not None:
            future = inner(state, bucket)
        else:
            buffer = bucket.buffer().mul_(1.0 / processes)
            future = dist.all_reduce(buffer, async_op=True).get_future().then(lambda done: done.value()[0])

        def finished(done: torch.futures.Future) -> torch.Tensor:
            marks.comm.add(started, time.perf_counter(), False)
            return done.value()

        return future.then(finished)

    return hook


def timed_buffer_broadcast(ddp: torch.nn.Module, marks: StepMarks) -> None:
    """DDP broadcasts rank 0's buffers (batch norm's statistics) at the start of every forward, a
    collective a CPU rank waits for inside the pass: each one's span is noted, as exposed (a rank
    that waits there for a late rank would otherwise count the wait as compute)."""
    broadcast = ddp._sync_buffers  # DDP's own method, called from its forward

    def timed() -> None:
        started = time.perf_counter()
        broadcast()
        marks.comm.add(started, time.perf_counter(), True)

    ddp._sync_buffers = timed


def timed_fsdp_collectives(model: torch.nn.Module, marks: StepMarks) -> None:
    """FSDP2's own all-gather and reduce-scatter on every unit, each call's span noted: on a CPU rank
    they block it (Gloo), so their time is exposed communication inside the pass."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    def timed(call: Callable) -> Callable:
        def run(*args, **kwargs):
            started = time.perf_counter()
            work = call(*args, **kwargs)
            if work is not None:  # an asynchronous call: its span would be a launch
                marks.untimed("FSDP2 ran a collective asynchronously: its duration is not read")
            elif marks.comm is not None:
                marks.comm.add(started, time.perf_counter(), True)
            return work

        return run

    class TimedAllGather(DefaultAllGather):
        __call__ = timed(DefaultAllGather.__call__)

    class TimedReduceScatter(DefaultReduceScatter):
        __call__ = timed(DefaultReduceScatter.__call__)

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(TimedAllGather())
            module.set_custom_reduce_scatter(TimedReduceScatter())


def dataparallel_compute_end(replicas: list[torch.nn.Module], marks: StepMarks) -> None:
    """b for DataParallel: when every replica's parameters have their gradients, before the backward
    of its broadcast adds them up on the first GPU (its reduction, inside the graph)."""
    # replicate() keeps a replica's parameters (outputs of the broadcast, not leaves) as plain
    # attributes, listed in each module's _former_parameters
    parameters = [
        p
        for replica in replicas
        for module in replica.modules()
        for p in module._former_parameters.values()
        if p is not None and p.requires_grad
    ]
    if parameters:
        torch.autograd.graph.register_multi_grad_hook(parameters, lambda _grads: marks.computed(), mode="all")


def build_marks(device: Device, backend: Backend) -> StepMarks:
    """The marks of this rank's steps (training.step_split), before the backend wraps the model:
    DDP and FSDP on CPU ranks time their collectives into them (Backend.untimed_comm)."""
    return StepMarks(device.device, backend.untimed_comm)
