"""Benchmark: images/s of the PyTorch and TensorFlow UNets on the same arrays (issue 7, item 3).

Both models train in the bare loops of harness_overhead.py (same arrays, batch, loss and Adam;
1 rank, CPU, the same compute threads), each run in a fresh process, the configurations in
turn within each round. "torch" and "tensorflow" are the settings the pipeline trains with
(PyTorch channels-last, TensorFlow with oneDNN's kernels on: see scalebench/train/torch/runtime.py
and scalebench/train/tf/__init__.py); the variants are the frameworks' own defaults on this kind
of CPU (PyTorch NCHW, TensorFlow without oneDNN), which explain the gap the pipeline had before.
The benchmark runs with the pipeline's Python; each framework's loop with that framework's.

    .venv/bin/python benchmarks/framework_parity.py [--rounds 3] [--epochs 3] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

SCRIPT = str(Path(__file__).resolve().parent / "harness_overhead.py")
PARITY = (0.75, 1.33)

# name -> (harness_overhead child mode, extra child arguments, extra environment)
CONFIGURATIONS = {
    "torch": ("torch-bare", {}, {}),
    "tensorflow": ("tensorflow-bare", {}, {}),
    "torch NCHW": ("torch-bare", {"nchw": True}, {}),
    "tensorflow oneDNN off": ("tensorflow-bare", {}, {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    # Not run by default: how much of the harness overhead (item 1) is its determinism setting.
    "torch deterministic": ("torch-bare", {"determinism": True}, {}),
    "tensorflow deterministic": ("tensorflow-bare", {"determinism": True}, {}),
}
DEFAULT = ["torch", "tensorflow", "torch NCHW", "tensorflow oneDNN off"]
# The two the ratio is of (their bare loops are harness_overhead.py's; its smoke run trains torch's alone).
SMOKE = {"rounds": 1, "epochs": 2, "size": [32, 48], "count": 10, "batch": 2, "only": ["torch", "tensorflow"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration (default 3)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up (default 3)")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    parser.add_argument("--count", type=int, default=20, help="synthetic pairs (80%% train; default 20)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=list(CONFIGURATIONS), default=DEFAULT)
    parser.add_argument("--workdir", help="keep the data here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    height, width = options.size
    with _common.workspace(options.workdir, "framework_parity_") as root:
        print(f"{height}x{width}, batch {options.batch}, {options.threads} thread(s), {options.rounds} rounds")
        data = _common.prepare_dataset(root, options.count, height, width)
        rates: dict[str, list[float]] = {name: [] for name in options.only}
        for round_number in range(options.rounds):
            for name in options.only:
                mode, extra, env = CONFIGURATIONS[name]
                framework = mode.split("-")[0]  # the framework the child's loop imports
                args = {"data": str(data), "epochs": options.epochs, "batch": options.batch, "threads": options.threads}
                result = _common.run_child(
                    SCRIPT,
                    mode,
                    {**args, "repeat": 1, **extra},
                    _common.single_process_env(framework, **env),
                    framework=framework,
                )
                rate = result["images_per_epoch"] / _common.steady_epoch_s(result["epoch_times"])
                rates[name].append(rate)
                print(f"  round {round_number + 1} {name}: {rate:.2f} images/s  load {_common.load_average():.2f}")
        summary = {name: _common.median(values) for name, values in rates.items()}
        for name, rate in summary.items():
            print(f"{name}: {rate:.2f} images/s (median of {len(rates[name])})")
        if "torch" in summary and "tensorflow" in summary:
            ratio = summary["torch"] / summary["tensorflow"]
            inside = "inside" if PARITY[0] <= ratio <= PARITY[1] else "outside"
            verdict = "smoke: no verdict" if options.smoke else f"{inside} {PARITY[0]}-{PARITY[1]}"
            print(f"torch / tensorflow: {ratio:.3f} ({verdict})")
        print("RESULT " + json.dumps({"rates": rates, "median": summary}), flush=True)


if __name__ == "__main__":
    main()
