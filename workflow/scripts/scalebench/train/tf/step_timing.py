"""TensorFlow's marks of the step split ("in-graph timestamps"; train/step_timing.py says what is
made of them).

The step is one tf.function (framework.Steps); with training.step_split it also returns four
clock readings per replica, each taken in the graph once the tensors it depends on exist:

    a  the step's inputs (and the forward waits for a, so a is its start)
    b  every gradient of the replica         c  the reduced gradients (MultiWorkerMirrored's and
    d  the variables as updated                 Mirrored's all_reduce, Horovod's allreduces)

Exposed communication is c - b. A reading is the host's perf_counter() through a numpy_function
with control dependencies: tf.timestamp() would do, but TensorFlow refuses it under op
determinism (this project's default on CPU ranks). A numpy_function costs less than half
a py_function (no eager tensors to make): 41-45 against 98-100 us per mark on a CPU core
(benchmarks/tf_mark_cost.py). Only those readings, control dependencies and identities are
added: the same ops compute the same values (a test trains with the split on and off to
identical losses, IOU and checkpoints). A timestamp whose control input is a GPU op would fire
when the op is queued, not done; on a GPU each mark therefore waits for one value read from its
tensors to reach the host (a scalar device-to-host copy per mark, four per step, queued behind
the work it marks, so it waits without stopping the device or the reductions from overlapping).
The marks are read (numpy) only at the epoch's end.

TensorFlow's collectives run inside the step's graph and report no duration of their own: the
total communication time and its overlap stay empty with COMM_REASON (the profiler's trace,
training.profile, shows them).
"""

from __future__ import annotations

import time

import tensorflow as tf

from scalebench.train.interfaces import Backend
from scalebench.train.step_timing import StepTimes
from scalebench.train.tf.runtime import Device

COMM_REASON = (
    "TensorFlow's collectives run inside the step's graph and report no duration of their own "
    "(training.profile's trace shows them)"
)


def now() -> float:
    return time.perf_counter()


def stamp(tensors, gpu: bool) -> tf.Tensor:
    """The host's clock once `tensors` are computed (on a GPU: once a value of each reached the host)."""
    tensors = [t for t in tf.nest.flatten(tensors) if t is not None]
    if gpu:
        probe = tf.add_n([tf.cast(tf.reshape(t, [-1])[0], tf.float64) for t in tensors])
        with tf.device("/cpu:0"):
            tensors = [tf.identity(probe)]
    with tf.control_dependencies(tensors):
        return tf.numpy_function(now, [], tf.float64, stateful=True)


def after(marks: list, tensors: list) -> list:
    """`tensors` (identities) that exist only once `marks` do: what follows them waits."""
    with tf.control_dependencies(marks):
        return [tf.identity(t) for t in tensors]


def sleep(seconds: tf.Variable, inputs: list) -> tf.Tensor:
    """A test fault's delay (faults.py): sleeps `seconds` once `inputs` exist, in the step's graph."""

    def wait(value):
        if value > 0:
            time.sleep(float(value))
        return value

    with tf.control_dependencies(tf.nest.flatten(inputs)):
        return tf.py_function(wait, [seconds.read_value()], tf.float64)


class StepMarks:
    """The marks of one rank's steps in one epoch. Each step has one or more segments (a function
    call: accumulate, then apply), each a [a, b, c, d] tensor per local replica, as the step
    functions returned them. On a CPU rank the step's span is read on the host around the whole
    Steps.train (its calls' dispatch included, as PyTorch's span is), on a GPU from the segments'
    a and d (the host runs ahead of the device there)."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self.steps: list[tuple[list[list[tf.Tensor]], float | None]] = []  # this epoch's: (segments, host span)
        self.segments: list[list[tf.Tensor]] = []  # the step under way's
        self.started: float | None = None  # when it started on the host (CPU ranks)

    def start_epoch(self) -> None:
        self.steps, self.segments, self.started = [], [], None

    def begin(self) -> None:
        self.started = None if self.gpu else now()

    def add(self, stamps: list[tf.Tensor]) -> None:
        self.segments.append(stamps)

    def end(self) -> None:
        span = None if self.started is None else now() - self.started
        self.steps.append((self.segments, span))
        self.segments = []

    def times(self) -> StepTimes:
        """Per step: its span, and its exposed communication: from the last replica's gradients to
        the last replica's reduced ones, summed over its segments."""
        step_s, exposed_s = [], []
        for segments, host_span in self.steps:
            span = exposed = 0.0
            for stamps in segments:
                values = [stamp.numpy() for stamp in stamps]
                span += max(v[3] for v in values) - min(v[0] for v in values)
                exposed += max(v[2] for v in values) - max(v[1] for v in values)
            step_s.append(float(span if host_span is None else host_span))
            exposed_s.append(float(exposed))
        return StepTimes(step_s, exposed_s, None, COMM_REASON)


def build_marks(device: Device, backend: Backend) -> StepMarks:
    """The marks of this rank's steps (training.step_split): clock readings in the step's graph."""
    return StepMarks(device.type == "cuda")
