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

DESCRIPTION = "XLA (jit_compile) of each replica's forward and backward; reduction, optimizer and evaluation outside"


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
    """`function` compiled by XLA."""
    return tf.function(function, jit_compile=True)
