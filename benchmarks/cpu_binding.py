"""Benchmark: ranks bound to their cores against ranks the OS places (cluster.cpu_binding, issue 33).

`--cells` cells of `--ranks` ranks each run at the same time on this machine, through
workflow/scripts/launch.py as the train rule starts them, once with cluster.cpu_binding: cores
(each cell holds its own cores from the local pool, each rank is bound to its share) and once
with none (the OS places every thread), alternating which goes first, `--repeats` times. One
compute thread per rank (training.threads_per_rank: 1), so `cores` needs cells x ranks cores:
on a machine with fewer, the cells that find none free run unbound and the line says how many
were bound.

Figures per setting: the median steady epoch time over the cells and repeats, and the spread of
a cell's epoch times (the coefficient of variation of its epochs after the first, median over
the cells and repeats): ranks that wander between cores and sockets show as a wider spread and,
across sockets, a longer epoch. On a GPU machine (`--device cuda`) each cell also holds its own
GPU ids, and its ranks are bound to the cores nearest them.

    .venv/bin/python benchmarks/cpu_binding.py [--cells 2] [--ranks 2] [--epochs 8] [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

SMOKE = {"cells": 1, "ranks": 1, "epochs": 2, "repeats": 1, "count": 10, "size": [32, 48], "batch": 2}


def start_cell(settings: dict, data: Path, out: Path, pool: Path) -> subprocess.Popen:
    """A cell's launch.py, started without waiting (the cells of a round run at the same time)."""
    command = _common.cell_command(settings, data, out)
    env = _common.single_process_env(SCALEBENCH_EXECUTOR="local", SCALEBENCH_LOCAL_POOL=str(pool))
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def round_of_cells(options: argparse.Namespace, binding: str, data: Path, root: Path) -> list[dict]:
    """Run `options.cells` cells at once with `binding`; each one's steady epoch, spread and binding."""
    settings = _common.cell_settings(
        "torch",
        "native",
        options.ranks,
        tuple(options.size),
        options.count,
        epochs=options.epochs,
        batch_per_gpu=options.batch,
        threads_per_rank=1,
        device=options.device,
        loader={"workers": 0},
        eval_every=0,
        predictions=0,
    )
    settings["cpu_binding"] = binding
    outs = [root / f"cell{n}" for n in range(options.cells)]
    processes = [start_cell(settings, data, out, root / "pool") for out in outs]
    results = []
    for process, out in zip(processes, outs, strict=True):
        log, _ = process.communicate(timeout=3600)
        if process.returncode:
            raise RuntimeError(f"cell {out.name} failed:\n{log[-4000:]}")
        epochs, _ = _common.read_metrics(out)
        times = [e["epoch_time_s"] for e in epochs][1:]
        run = json.loads((out / "run.json").read_text())
        results.append(
            {
                "steady_s": _common.steady_epoch_s([e["epoch_time_s"] for e in epochs]),
                "spread": statistics.pstdev(times) / statistics.mean(times) if len(times) > 1 else 0.0,
                "bound": run.get("cpu_bound_by") is not None,
                "cpus": run.get("rank_cpus"),
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=2, help="cells running at the same time")
    parser.add_argument("--ranks", type=int, default=2, help="ranks per cell")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", type=int, default=120, help="synthetic image pairs")
    parser.add_argument("--size", type=int, nargs=2, default=[128, 128])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--workdir", help="keep the data and cells here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    header = f"  {options.cells} cells x {options.ranks} ranks at once, {options.size[0]}x{options.size[1]}, {options.device}"
    with _common.workspace(options.workdir, "cpu_binding_", header) as root:
        data = _common.prepare_dataset(root / "data", options.count, *options.size)
        measured: dict[str, list[dict]] = {"cores": [], "none": []}
        for repeat in range(options.repeats):
            order = ["cores", "none"] if repeat % 2 == 0 else ["none", "cores"]
            for binding in order:
                measured[binding] += round_of_cells(options, binding, data, root / f"{binding}-{repeat}")
        print(f"{'cpu_binding':12} {'s/epoch':>9} {'epoch spread':>13} {'cells bound':>12}")
        for binding, cells in measured.items():
            steady = _common.median([c["steady_s"] for c in cells])
            spread = _common.median([c["spread"] for c in cells])
            bound = sum(c["bound"] for c in cells)
            print(f"{binding:12} {steady:9.3f} {spread:13.3f} {bound:>5} of {len(cells):<5}", flush=True)
        print("each rank's cores, first round:", [c["cpus"] for c in measured["cores"][: options.cells]])


if __name__ == "__main__":
    main()
