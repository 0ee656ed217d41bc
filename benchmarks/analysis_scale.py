"""Benchmark: collect and plot a full-size study (issue 6).

Generates the records of 2 frameworks x 2 backends x 8 GPU counts x 5 seeds x 200
epochs (160 cells, 32,000 epoch records; a few cells failed, diverged, truncated or
missing), saved predictions, prepared arrays and a legacy folder, then times the
analysis exactly as the workflow's scripts run it (collect -> scaling -> every figure).

    .venv/bin/python benchmarks/analysis_scale.py [--out DIR] [--keep] [--gpus 1 2 ...] [--seeds 5] [--epochs 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on sys.path)

_common.runs_with(_common.PIPELINE, __name__)

from scalebench.cell import Cell  # noqa: E402

FRAMEWORKS = ["torch", "tensorflow"]
BACKENDS = ["native", "horovod"]
GPUS = [1, 2, 4, 8, 16, 32, 64, 128]
SEEDS = 5
EPOCHS = 200
TARGET = 0.8
# The fates of the 160-cell study's cells by their number; the rest finished ok.
FATES_160 = {5: "failed", 17: "diverged", 40: "truncated", 41: "missing", 150: "missing"}
SMOKE = {"gpus": [1, 2], "seeds": 2, "epochs": 20}


def study_cells(gpus: list[int], seeds: int) -> list[dict]:
    """The keys of every cell of 2 frameworks x 2 backends x `gpus` x `seeds` seeds."""
    return [
        {"framework": f, "backend": b, "gpus": g, "seed": s}
        for f in FRAMEWORKS
        for b in BACKENDS
        for g in gpus
        for s in range(1, seeds + 1)
    ]


def fates(count: int) -> dict[int, str]:
    """FATES_160 placed at the same fractions of a study of `count` cells, one cell each."""
    placed: dict[int, str] = {}
    for number, fate in FATES_160.items():
        spot = number * count // 160
        while spot in placed:
            spot += 1
        if spot < count:
            placed[spot] = fate
    return placed


def write_cell(
    folder: Path, cell: dict, rng: np.random.Generator, fate: str, epochs: int = EPOCHS, settings: dict | None = None
) -> None:
    """A cell's records as its job leaves them: `fate` ok, failed (only the log), diverged (at a
    quarter of the epochs), truncated (metrics.jsonl cut in half) or missing (nothing of its own:
    the folder may hold the planner's settings.json). The validation IOU rises on a time scale
    proportional to `epochs`, so a short study has the shape of the full one. `settings`: what
    run.json records the job was started with (the planner compares them with the study's)."""
    if fate == "missing":
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("epoch ...\n")
    if fate == "failed":  # Snakemake deleted the outputs; only the log stays
        return
    gpus = cell["gpus"]
    efficiency = 0.92 ** np.log2(gpus) * (0.95 if cell["backend"] == "horovod" else 1.0)
    epoch_time = 60.0 / (gpus * efficiency) * rng.normal(1, 0.03)
    eval_every, diverge_at = max(1, epochs // 20), max(1, epochs // 4)
    scale = epochs / EPOCHS  # the curves' time constants, in epochs, shrink with the study
    rise = (20 + 3 * np.log2(gpus)) * scale
    lines, total = [], 0.0
    for epoch in range(1, epochs + 1):
        seconds = epoch_time * (1.8 if epoch == 1 else rng.normal(1, 0.02))
        total += seconds
        iou = 0.95 * (1 - np.exp(-epoch / rise))
        evaluated = epoch % eval_every == 0
        record = {
            "type": "epoch",
            "epoch": epoch,
            "loss": float(0.7 * np.exp(-epoch / (40 * scale)) + 0.05 + rng.normal(0, 0.005)),
            "lr": 0.001 * gpus,
            "epoch_time_s": seconds,
            "images_per_s": 1000 / seconds,
            "data_wait_s": seconds * 0.05 * np.log2(2 * gpus),
            "peak_mem_mb": 4000.0,
            "steps": 250 // gpus,
            "train_time_s": total,
            "val_iou": float(iou) if evaluated else None,
            "val_loss": 0.2 if evaluated else None,
        }
        lines.append(json.dumps(record))
        if fate == "diverged" and epoch == diverge_at:
            record["loss"] = None
            lines[-1] = json.dumps(record)
            break
    status = "diverged" if fate == "diverged" else "ok"
    final = {"type": "final", "status": status, "setup_s": 5.0, "train_time_s": total, "epochs_completed": epoch}
    final.update(test_loss=0.2, iou=float(iou + rng.normal(0, 0.005)), test_time_s=3.0)
    lines.append(json.dumps(final))
    text = "\n".join(lines) + "\n"
    if fate == "truncated":
        text = text[: len(text) // 2]
    (folder / "metrics.jsonl").write_text(text)
    run = {**cell, "status": status, "replicas": gpus, "hosts": [f"node{i}" for i in range(max(1, gpus // 4))]}
    run.update(versions={"torch": "2.13.0", "cuda": "12.8"}, python="3.11.7", slurm={"job_id": "1234"})
    if settings is not None:
        run["settings"] = settings
    (folder / "run.json").write_text(json.dumps(run))
    predictions = folder / "predictions"
    predictions.mkdir()
    from PIL import Image

    for index in range(4):
        Image.fromarray((rng.random((96, 128)) > 0.5).astype(np.uint8) * 255).save(
            predictions / f"test_{index:05d}.png"
        )


def write_study(runs: Path, cells: list[dict], epochs: int) -> None:
    """Every cell's records under the runs folder `runs`, a few of them with FATES_160's fates."""
    rng = np.random.default_rng(0)
    fated = fates(len(cells))
    for number, cell in enumerate(cells):
        write_cell(runs / Cell(**cell).path, cell, rng, fated.get(number, "ok"), epochs)


def generate(root: Path, cells: list[dict], epochs: int) -> list[dict]:
    """The study's records, prepared arrays and a legacy folder under `root`; the legacy entries."""
    rng = np.random.default_rng(1)
    write_study(root / "runs", cells, epochs)
    data = root / "data"
    data.mkdir()
    np.save(data / "images.npy", (rng.random((8, 96, 128)) * 255).astype(np.uint8))
    np.save(data / "masks.npy", (rng.random((8, 96, 128)) > 0.5).astype(np.uint8))
    legacy = root / "legacy"
    legacy.mkdir()
    for name, gpus in [("log_{}.csv", g) for g in (1, 2, 4, 8)] + [("log_hvd_{}.csv", g) for g in (1, 2, 4, 8)]:
        per_epoch = 70.0 / gpus**0.85
        rows = [f"{e},{per_epoch},{0.6 * np.exp(-e / 30):.4f},0.001,{per_epoch * 100},{4.0},0.9" for e in range(100)]
        (legacy / name.format(gpus)).write_text(
            ",time_per_epoch,loss,lr,training_time,test_time,iou\n" + "\n".join(rows) + "\n"
        )
    (legacy / "log_hvd_16.csv").write_text("broken,file\n1\n")
    return [{"path": str(legacy), "framework": "torch", "label": "reference study"}]


def run(root: Path, cells: list[dict], legacy: list[dict]) -> dict[str, float]:
    # Imported here, before the clocks start (pandas, scipy, matplotlib, plotnine: seconds): a
    # --parse-only, or pipeline_scale.py's use of this module's generator, does without them.
    from scalebench.analysis import scaling
    from scalebench.analysis import study as summary
    from scalebench.analysis.summary_csv import read_epochs, read_runs
    from scalebench.report import scaling_figures as plots
    from scalebench.report import training_figures as plots_training
    from scalebench.report.predictions import picture_panel
    from scalebench.report.saving import save_figure
    from scalebench.report.time_split_figures import time_split_figure
    from scalebench.rerun import Invocation

    out = root / "out"
    out.mkdir()
    timings = {}
    start = time.perf_counter()
    invocation = Invocation(("snakemake",), str(root), ("--profile", "profiles/slurm"))  # the rerun commands' start
    collected = summary.collect_study(str(root / "runs"), cells, TARGET, legacy, invocation)
    for name in ("runs", "epochs", "provenance", "incomplete"):
        getattr(collected, name).to_csv(out / f"{name}.csv", index=False)
    timings["collect"] = time.perf_counter() - start

    mark = time.perf_counter()
    runs = read_runs(out / "runs.csv")
    table = scaling.scaling(runs)
    table.to_csv(out / "scaling.csv", index=False)
    timings["scaling"] = time.perf_counter() - mark

    mark = time.perf_counter()
    epochs = read_epochs(out / "epochs.csv")
    figures = {
        "speedup": plots.speedup_figure(table, runs, "train_time_s"),
        "speedup_epoch": plots.speedup_figure(table, runs, "steady_epoch_s"),
        "efficiency": plots.efficiency_figure(table, runs, "train_time_s"),
        "efficiency_epoch": plots.efficiency_figure(table, runs, "steady_epoch_s"),
        "iou": plots.iou_figure(runs),
        "throughput": plots.throughput_figure(runs),
        "time_split": time_split_figure(runs),
        "completeness": plots.completeness_figure(runs),
        "loss": plots_training.loss_figure(epochs),
        "iou_time": plots_training.iou_time_figure(epochs, TARGET),
        "time_to_target": plots_training.time_to_target_figure(runs, epochs, TARGET),
    }
    for name, figure in figures.items():
        save_figure(figure, out / f"{name}.png")
    picture_panel(runs, root / "runs", root / "data", 3).savefig(out / "predictions.png", dpi=120)
    timings["plots"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - start
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the generated study and the outputs (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--gpus", type=int, nargs="+", default=GPUS, help="GPU counts (default 1 to 128)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds per GPU count (default 5)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs per cell (default 200)")
    args = _common.parse_options(parser, SMOKE)
    root = Path(args.out or tempfile.mkdtemp(prefix="analysis_scale_"))
    root.mkdir(parents=True, exist_ok=True)
    print(_common.machine_line(), flush=True)
    try:
        cells = study_cells(args.gpus, args.seeds)
        legacy = generate(root, cells, args.epochs)
        timings = run(root, cells, legacy)
    finally:  # a temporary folder goes, also when the analysis fails
        if not (args.out or args.keep):
            shutil.rmtree(root)
    print(
        f"{len(cells)} cells x {args.epochs} epochs + legacy: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    )
    print(f"outputs in {root / 'out'}" if args.out or args.keep else "")


if __name__ == "__main__":
    main()
