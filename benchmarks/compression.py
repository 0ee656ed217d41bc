"""Benchmark: fp16 gradient compression against none, 2 ranks, side by side (issue 16).

For each backend that can compress (training.compression: fp16), two cells of 2 ranks train the
same data, model and schedule, one with compression none and one with fp16, started through
workflow/scripts/launch.py with the default local launchers as the train rule starts them. The
figures are the ratio of the steady-state epoch times (fp16 / none; below 1 means compression
paid off) and the difference of the final training losses (the cost of float16 rounding in the
reduction). The two cells of a backend run back to back, alternating which goes first per
repeat, so that a drift of the machine's load does not favour one.

On CPU ranks the reduction goes through Gloo on one host, where it is cheap and the casts to and
from float16 are not free; the interesting figures come from GPUs on several nodes (NCCL),
where the bytes on the wire dominate. Run it there with --device cuda. The cells run without the
collective benchmark (training.collectives.budget_s: 0; it runs before the timed epochs).

    .venv/bin/python benchmarks/compression.py [--backends torch_native torch_horovod ...] [--repeats 2] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

# One backend: the benchmark's code is the same for each (the backend is a setting of the cell).
SMOKE = {"backends": ["torch_native"], "repeats": 1, "epochs": 2, "size": [32, 48], "count": 10, "batch": 2}


def compressing_backends() -> list[str]:
    """Every registered framework_backend that has fp16 gradient compression."""
    from scalebench import backends

    return [
        f"{framework}_{name}"
        for framework, specs in backends.REGISTRY.items()
        for name in specs
        if backends.compression_problem(framework, name, "fp16") is None
    ]


def run_cell(backend: str, compression: str, options: argparse.Namespace, data: Path, out: Path) -> dict:
    framework, kind = backend.split("_")
    settings = _common.cell_settings(
        framework,
        kind,
        2,
        tuple(options.size),
        options.count,
        epochs=options.epochs,
        batch_per_gpu=options.batch,
        compression=compression,
        threads_per_rank=1,
        device=options.device,
        eval_every=0,
        checkpoint_every=0,
        predictions=0,
        loader={"workers": 0},
        collectives={"budget_s": 0},
    )
    result = _common.launch_cell(settings, data, out, timeout=options.timeout)
    if result.returncode:
        raise RuntimeError(f"{backend} with compression {compression} failed:\n{result.stdout[-3000:]}")
    epochs, final = _common.read_metrics(out)
    return {"steady_s": _common.steady_epoch_s([r["epoch_time_s"] for r in epochs]), "loss": epochs[-1]["loss"]}


def main() -> None:
    choices = compressing_backends()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=choices, default=choices)
    parser.add_argument("--repeats", type=int, default=2, help="pairs of cells per backend (default 2)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per cell; the first is warm-up (default 4)")
    parser.add_argument("--size", type=int, nargs=2, default=[128, 128], metavar=("H", "W"))
    parser.add_argument("--count", type=int, default=40, help="synthetic pairs (default 40)")
    parser.add_argument("--batch", type=int, default=4, help="training.batch_per_gpu (default 4)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--workdir", help="keep the cells here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    height, width = options.size
    header = f"  2 ranks, {height}x{width}, batch {options.batch}, {options.epochs} epochs, {options.device}"
    with _common.workspace(options.workdir, "compression_", header) as root:
        data = _common.prepare_dataset(root / "data", options.count, *options.size)
        print(f"{'backend':22} {'none s/epoch':>13} {'fp16 s/epoch':>13} {'fp16/none':>10} {'loss diff':>10}")
        for backend in options.backends:
            measured: dict[str, list[dict]] = {"none": [], "fp16": []}
            for repeat in range(options.repeats):
                order = ["none", "fp16"] if repeat % 2 == 0 else ["fp16", "none"]
                for compression in order:
                    out = root / backend / f"{compression}-{repeat}"
                    measured[compression].append(run_cell(backend, compression, options, data, out))
            none = _common.median([m["steady_s"] for m in measured["none"]])
            fp16 = _common.median([m["steady_s"] for m in measured["fp16"]])
            loss = max(abs(a["loss"] - b["loss"]) for a, b in zip(measured["none"], measured["fp16"]))
            print(f"{backend:22} {none:13.3f} {fp16:13.3f} {fp16 / none:10.3f} {loss:10.2e}", flush=True)


if __name__ == "__main__":
    main()
