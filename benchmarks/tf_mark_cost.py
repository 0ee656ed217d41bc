"""What TensorFlow's step-split marks cost per step, alone (issue 30).

The same small tf.function (a matmul, a multiply, an add) is called with no marks, with the four
marks the train step takes (train/tf/step_timing.stamp: a numpy_function reading the host's
clock behind control dependencies), and with the same four readings through a py_function (the
alternative the project does not use), in alternating rounds. The figure per reader is the
median call time less the unmarked call's: the host cost the marks add to every step, which
benchmarks/step_split_overhead.py then compares with a whole epoch.

    .venv/frameworks/tensorflow/bin/python benchmarks/tf_mark_cost.py [--rounds 20] [--calls 500] [--size 64]
                                                                      [--smoke]

TensorFlow runs as a CPU rank does here (one intra-op and one inter-op thread, op determinism);
the script is its own process, so nothing else has configured TensorFlow before it: it runs with
TensorFlow's Python.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on the path)

_common.runs_with("tensorflow", __name__)

# TensorFlow is imported where it runs, after the options are parsed: a --parse-only (the docs'
# commands, tests/integration/test_benchmarks_smoke.py) then costs no TensorFlow start.
if TYPE_CHECKING:
    import tensorflow as tf

MARKS = 4  # a, b, c, d of every step
SMOKE = {"rounds": 1, "calls": 5, "size": 8}


def py_function_stamp(tensors: list, gpu: bool) -> tf.Tensor:
    import tensorflow as tf

    with tf.control_dependencies(tensors):
        return tf.py_function(time.perf_counter, [], tf.float64)


def marked_step(stamp):
    """A step of three ops with a mark before, between and after them (none where stamp is None)."""
    import tensorflow as tf
    from scalebench.train.tf import step_timing

    def step(x):
        if stamp is None:
            return tf.matmul(x, x) * 2.0 + 1.0
        started = stamp([x], False)
        (x,) = step_timing.after([started], [x])
        product = tf.matmul(x, x)
        computed = stamp([product], False)
        scaled = product * 2.0
        reduced = stamp([scaled], False)
        result = scaled + 1.0
        return result, tf.stack([started, computed, reduced, stamp([result], False)])

    return tf.function(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds per reader (default 20)")
    parser.add_argument("--calls", type=int, default=500, help="calls per round (default 500)")
    parser.add_argument("--size", type=int, default=64, help="the square matrix's side (default 64)")
    options = _common.parse_options(parser, SMOKE)
    import tensorflow as tf
    from scalebench.train.tf import step_timing

    print(_common.machine_line(), flush=True)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    steps = {
        "none": marked_step(None),
        "numpy_function (the project's)": marked_step(step_timing.stamp),
        "py_function": marked_step(py_function_stamp),
    }
    x = tf.ones([options.size, options.size])
    for step in steps.values():
        step(x)  # traced before the clock
    per_call: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(options.rounds):
        for name, step in steps.items():
            started = time.perf_counter()
            for _ in range(options.calls):
                step(x)
            per_call[name].append((time.perf_counter() - started) / options.calls)
    bare = statistics.median(per_call["none"])
    print(f"{'none':<32} {bare * 1e6:8.1f} us per call")
    for name, times in per_call.items():
        if name == "none":
            continue
        added = statistics.median(times) - bare
        print(
            f"{name:<32} {statistics.median(times) * 1e6:8.1f} us per call: the {MARKS} marks add "
            f"{added * 1e6:.1f} us per step ({added / MARKS * 1e6:.1f} us per mark)"
        )


if __name__ == "__main__":
    main()
