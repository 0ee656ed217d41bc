"""training.compile for TensorFlow: XLA (jit_compile) of each replica's forward and backward pass.

The compiled function gathers and converts the batch, runs the model and the tape, and returns
the loss and gradients; the backend's reduction and the optimizer step stay outside it (XLA does
not compile TensorFlow's cross-replica collectives or Horovod's ops). Evaluation stays as it is.
The first epoch pays for the compilation (the tables report it apart from the steady epochs).
"""

from __future__ import annotations

import tensorflow as tf

from scalebench import backends
from scalebench.refusal import SettingRefused
from scalebench.train.observed import compiled_record

COMPILER = "XLA (jit_compile)"


def check_available() -> None:
    """Fail before anything is built where XLA cannot compile on this process's device, saying why."""
    try:
        tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
    except (tf.errors.OpError, ValueError, NotImplementedError) as error:
        raise SettingRefused(
            f"training.compile: TensorFlow {tf.__version__} cannot compile with XLA (jit_compile) here: {error}; "
            "set training.compile: false (or leave matrix.compile out)"
        ) from error


def check_determinism(deterministic: bool) -> None:
    """Compiled TensorFlow steps cannot be deterministic: refuse before anything is built."""
    if deterministic:
        raise SettingRefused(
            f"training.compile: {backends.TF_DETERMINISTIC_COMPILE_REASON} (training.deterministic null means "
            "true on CPU ranks)"
        )


def step_function(function):
    """`function` compiled by XLA (without AutoGraph, as the steps it runs in: steps.graph_function)."""
    return tf.function(function, jit_compile=True, autograph=False)


def in_xla_context() -> bool:
    """Whether the step being traced now is traced for XLA: inside a jit_compile function, whose
    graph TensorFlow must compile with XLA or fail (it never runs one uncompiled). Keras asks
    the same question of its layers."""
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import control_flow_util

    return bool(control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()))


def observed(traced_for_xla: list[bool], replicas: int) -> dict:
    """What XLA compiled for the training steps of this process: the traces of the replica's step
    made for XLA (each an XLA computation; one per local replica, whose devices differ), those
    beyond one per replica counted as recompiles (a new input shape retraces the step)."""
    graphs = sum(traced_for_xla)
    recompiles = max(graphs - replicas, 0) if graphs else 0
    reasons = [f"{graphs} traces of the replica's step for XLA, {replicas} replica(s)"] if recompiles else []
    return compiled_record(COMPILER, graphs, recompiles, reasons)
