"""What AutoGraph would cost a TensorFlow rank: the CPU of one whole rank, steps traced with and without it.

The project traces its TensorFlow steps without AutoGraph (train/tf/steps.py graph_function): they
branch only on settings, so AutoGraph's rewrite of every function they call, the UNet's layers
included, changes no graph and costs tracing time. Each round runs one rank of a one-GPU
MultiWorkerMirrored cell through the real entry point (train/entry.py main: build, trace, train,
evaluate, predictions) in a fresh process per mode, the modes alternating and taking turns to go
first; the figure is the process's CPU time (user and system) from its start to the rank's end. The
second mode wraps the same step functions in tf.function with its default, AutoGraph on. The
benchmark runs with the pipeline's Python (the cell's settings), each rank with TensorFlow's.

    .venv/bin/python benchmarks/tf_autograph_cost.py [--rounds 5] [--epochs 3] [--size 64] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on the path)

_common.runs_with(_common.PIPELINE, __name__)

MODES = ("without AutoGraph (the project's)", "with AutoGraph")
SMOKE = {"rounds": 1, "epochs": 1, "size": 32}


def child(mode: str, args: dict) -> None:
    """One rank, its steps traced as `mode` says; prints this process's CPU seconds as JSON."""
    import tensorflow as tf
    from scalebench.train import entry
    from scalebench.train.tf import steps

    if mode == MODES[1]:
        steps.graph_function = lambda function, **options: tf.function(function, **options)
    with tempfile.TemporaryDirectory() as out:
        status = entry.main(["--settings", json.dumps(args["settings"]), "--data", args["data"], "--out", out])
    if status != 0:
        raise SystemExit(f"the rank ended with {status}")
    print(json.dumps({"cpu_s": time.process_time()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of both modes (default 5)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the rank (default 3)")
    parser.add_argument("--size", type=int, default=64, help="the images' side in pixels (default 64)")
    parser.add_argument("--workdir", help="keep the dataset here (default: a temporary folder)")
    options = _common.parse_options_or_run_child(parser, SMOKE, child)
    print(_common.machine_line(), flush=True)
    with _common.workspace(options.workdir, "tf-autograph-") as root:
        data = _common.prepare_dataset(root, 40, options.size, options.size)
        training = {"epochs": options.epochs, "batch_per_gpu": 4, "threads_per_rank": 1, "predictions": 2}
        settings = _common.cell_settings("tensorflow", "native", 1, (options.size, options.size), 40, **training)
        cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
        for round_ in range(options.rounds):
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:  # neither mode always starts first
                args = {"settings": settings, "data": str(data)}
                result = _common.run_child(__file__, mode, args, framework="tensorflow")
                cpu[mode].append(result["cpu_s"])
    ours, theirs = (_common.median(cpu[mode]) for mode in MODES)
    for mode in MODES:
        values = ", ".join(f"{value:.2f}" for value in cpu[mode])
        print(f"{mode:<36} {_common.median(cpu[mode]):6.2f} CPU-s per rank (median of {values})")
    print(f"AutoGraph would add {theirs - ours:.2f} CPU-s per rank ({(theirs - ours) / ours:+.0%})")


if __name__ == "__main__":
    main()
