"""What the step split costs (issue 30): the same cell with training.step_split on and off.

Each backend's cell runs through launch.py as the pipeline runs it, alternately with the split on
and off (so a change in the machine's load hits both; on first in even repeats, off first in odd
ones), `--repeats` times each; the figure is the
median steady epoch time (after the first) with the split on over the same with it off. The goal
is at most 1.02 (2% of a steady epoch). It exits non-zero where a backend misses it. It also
prints the range of the repeats' own ratios (on over off of the two runs of one repeat): where
that range is wider than the goal, only many repeats decide.

    .venv/bin/python benchmarks/step_split_overhead.py [--cells torch/native torch/fsdp ...] [--gpus 2]
                                                       [--repeats 3] [--epochs 4] [--images 64] [--size 256x384]
                                                       [--json results.json] [--workdir DIR] [--smoke]

Run it on a quiet machine (docs/benchmarks.md records the figures with the command and machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

CELLS = ("torch/native", "torch/fsdp", "torch/horovod", "tensorflow/native", "tensorflow/horovod")
GOAL = 1.02
# One cell of one rank: the benchmark's code is the same for each backend (a setting of the cell).
SMOKE = {"cells": ["torch/native"], "gpus": 1, "repeats": 1, "epochs": 2, "images": 10, "size": "32x48"}


def steady_epoch(root: Path, name: str, data: Path, framework: str, backend: str, options, split: bool) -> float:
    training = {
        "epochs": options.epochs,
        "eval_every": 0,
        "checkpoint_every": 0,
        "predictions": 0,
        "threads_per_rank": options.threads,
        "step_split": split,
        "collectives": {"budget_s": 0},  # before the timed epochs: only the job's wall time
    }
    settings = _common.cell_settings(framework, backend, options.gpus, options.size, options.images, **training)
    out = root / name
    result = _common.launch_cell(settings, data, out, timeout=options.timeout)
    if result.returncode:
        raise SystemExit(f"{name}: launch.py exited {result.returncode}:\n{(result.stdout + result.stderr)[-3000:]}")
    epochs, _ = _common.read_metrics(out)
    if split != (epochs[-1]["compute_s"] is not None):
        raise SystemExit(f"{name}: the split was {'not ' if split else ''}measured")
    return _common.steady_epoch_s([e["epoch_time_s"] for e in epochs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), help="framework/backend pairs")
    parser.add_argument("--gpus", type=int, default=2, help="ranks per cell (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs with the split on and off each (default 3)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run; the first is warm-up (default 4)")
    parser.add_argument("--images", type=int, default=64, help="synthetic image pairs (default 64)")
    parser.add_argument("--size", default="256x384", help="HxW of the prepared images (default 256x384)")
    parser.add_argument("--threads", type=int, default=1, help="training.threads_per_rank (default 1)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds one run may take (default 1200)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--workdir", help="keep data and cells here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    options.size = tuple(int(part) for part in options.size.split("x"))
    results, missed = {}, []
    header = f"  cells {' '.join(options.cells)}, {options.gpus} ranks, {options.size[0]}x{options.size[1]}"
    with _common.workspace(options.workdir, "step_split_overhead_", header) as root:
        data = _common.prepare_dataset(root, options.images, *options.size)
        for cell in options.cells:
            framework, backend = cell.split("/")
            times: dict[bool, list[float]] = {True: [], False: []}
            for repeat in range(options.repeats):
                # ABBA: on first in even repeats, off first in odd ones, so a bias of the first (or
                # second) run of a pair falls on both settings (always on-then-off read 0.95-0.96)
                for split in (True, False) if repeat % 2 == 0 else (False, True):
                    name = f"{framework}_{backend}_{'on' if split else 'off'}_{repeat}"
                    times[split].append(steady_epoch(root, name, data, framework, backend, options, split))
            ratio = _common.median(times[True]) / _common.median(times[False])
            # each repeat's two runs ran back to back: their ratio shows how far one pair alone swings
            pairs = [on / off for on, off in zip(times[True], times[False])]
            results[cell] = {"on_s": times[True], "off_s": times[False], "ratio": ratio, "pair_ratios": pairs}
            verdict = "smoke: no verdict" if options.smoke else "ok" if ratio <= GOAL else f"ABOVE the goal of {GOAL}"
            print(
                f"{cell:<20} steady epoch on {_common.median(times[True]):.4f} s, off "
                f"{_common.median(times[False]):.4f} s: on/off {ratio:.4f} ({verdict}); "
                f"per repeat {min(pairs):.3f}-{max(pairs):.3f}",
                flush=True,
            )
            if ratio > GOAL and not options.smoke:
                missed.append(cell)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2))
    if missed:
        raise SystemExit(f"step_split_overhead: above {GOAL}: {', '.join(missed)}")


if __name__ == "__main__":
    main()
