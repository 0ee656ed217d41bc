"""Benchmark: the data path at full size (issue 7, item 2).

The project's loop (PyTorch DDP or TensorFlow native, rank 0 of 1, in one process) trains at
768x1024, batch 2, on the CPU, once per training.loader.placement asked for (device: the samples
in the rank's memory, gathered per step; host: the loader reads each batch); the share of each
steady-state epoch spent waiting for the next batch is read from the data_wait_s and epoch_time_s
its metrics.jsonl records. Then the host loaders alone (the DataLoader over DistributedSampler
exactly as train/torch/data.py builds it, and tf_data.train_dataset) are iterated without a
model, and their images/s are set against the images/s the model consumes. The benchmark runs with
the pipeline's Python (the validated settings); each framework's part with that framework's.

    .venv/bin/python benchmarks/data_path.py [--framework torch tensorflow] [--placement device host]
                                             [--epochs 3] [--workers 0] [--smoke]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import harness_overhead  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

TARGET_SHARE = 0.05
# One placement: the benchmark's code is the same for both (the placement is a setting of the cell).
SMOKE = {"epochs": 2, "loader_epochs": 2, "size": [32, 48], "count": 10, "batch": 2, "placement": ["host"]}


def torch_loader(args: dict) -> dict:
    """Images/s of the training DataLoader alone, built as train/torch/data.py builds it."""
    import torch
    from scalebench.data.preprocess import read_manifest
    from scalebench.settings import ProcessFacts, RunSettings
    from scalebench.train.accumulation import epoch_batches
    from scalebench.train.torch import data

    run = RunSettings.from_json(args["settings"], args["data"], "unused")
    torch.set_num_threads(ProcessFacts.of_rank(run, os.environ).threads)
    training = run.training
    indices = read_manifest(args["data"])["train"] * training.dataset_repeat
    batches = epoch_batches(training, len(indices), 1, 1)
    sampler = data.train_sampler(args["data"], indices, 1, [0], 1, training.batch_per_gpu, batches)
    loader = data.host_train_loader(args["data"], sampler, training.loader, False, torch.device("cpu"))
    times, images = [], 0
    for epoch in range(args["epochs"]):
        sampler.set_epoch(epoch)
        started = time.perf_counter()
        images = sum(len(batch[0]) for batch in loader)
        times.append(time.perf_counter() - started)
    return {"epoch_times": times, "images_per_epoch": images}


def tf_loader(args: dict) -> dict:
    """Images/s of tf_data.train_dataset alone (one replica), as train/tf/data.py's Batches builds it per epoch."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    from scalebench.data.preprocess import load_arrays
    from scalebench.settings import ProcessFacts, RunSettings
    from scalebench.train.accumulation import epoch_batches
    from scalebench.train.tf import data as tf_data
    from scalebench.train.tf import runtime as tf_runtime

    settings = args["settings"]
    training = settings["training"]
    threads = training["threads_per_rank"]
    run = RunSettings.from_json(settings, args["data"], "unused")
    tf_runtime.configure(
        run, ProcessFacts.of_rank(run, {}), local_rank=0, ranks_on_node=1
    )  # threads, and the CPU as the rank would
    _, _, manifest = load_arrays(args["data"])
    train = manifest["train"] * training["dataset_repeat"]
    batches = epoch_batches(run.training, len(train), 1, 1)
    times, images = [], 0
    for epoch in range(args["epochs"]):
        started = time.perf_counter()
        batch = training["batch_per_gpu"]
        order = tf_data.ReplicaShards(train, 1, [0], 1, batch, batches)
        dataset = tf_data.train_dataset(args["data"], order, epoch, threads)
        images = sum(int(item[0][0].shape[0]) for item in dataset)
        times.append(time.perf_counter() - started)
    return {"epoch_times": times, "images_per_epoch": images}


def child(mode: str, args: dict) -> None:
    framework, kind = mode.split("-")
    if kind == "harness":
        result = harness_overhead.harness(args, framework)
    else:
        result = (torch_loader if framework == "torch" else tf_loader)(args)
    print(json.dumps(result))


def measure(framework: str, placement: str, options: argparse.Namespace, data: Path, root: Path) -> dict:
    height, width = options.size
    settings = _common.cell_settings(
        framework,
        "native",
        1,
        (height, width),
        options.count,
        epochs=options.epochs,
        batch_per_gpu=options.batch,
        threads_per_rank=options.threads,
        predictions=0,
        checkpoint_every=0,
        loader={"workers": options.workers, "placement": placement},
    )
    script = str(Path(__file__).resolve())
    out = root / f"{framework}_{placement}_run"
    out.mkdir(parents=True, exist_ok=True)
    trained = _common.run_child(
        script, f"{framework}-harness", {"settings": settings, "data": str(data), "out": str(out)}, framework=framework
    )
    loader = _common.run_child(
        script,
        f"{framework}-loader",
        {"settings": settings, "data": str(data), "epochs": options.loader_epochs},
        framework=framework,
    )
    shares = [w / t for w, t in zip(trained["data_wait_s"][1:], trained["epoch_times"][1:])]
    consumed = _common.median(trained["images_per_s"][1:])
    loaded = loader["images_per_epoch"] / _common.median(loader["epoch_times"][1:])
    return {
        "framework": framework,
        "placement": placement,
        "wait_shares": shares,
        "wait_share": _common.median(shares),
        "model_images_per_s": consumed,
        "loader_images_per_s": loaded,
        "loader_over_model": loaded / consumed,
        "steady_epoch_s": _common.steady_epoch_s(trained["epoch_times"]),
        "images_per_epoch": trained["images_per_epoch"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "tensorflow"], nargs="+", default=["torch", "tensorflow"])
    parser.add_argument("--epochs", type=int, default=3, help="training epochs; the first is warm-up (default 3)")
    parser.add_argument("--loader-epochs", type=int, default=4, help="passes of the loader alone (default 4)")
    parser.add_argument("--size", type=int, nargs=2, default=[768, 1024], metavar=("H", "W"))
    parser.add_argument("--count", type=int, default=8, help="synthetic pairs (default 8: 6 train, 2 test)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="training.threads_per_rank (default 1)")
    parser.add_argument("--placement", choices=["device", "host"], nargs="+", default=["device", "host"])
    parser.add_argument("--workers", type=int, default=0, help="training.loader.workers (default 0, as config.yaml)")
    parser.add_argument("--workdir", help="keep data and records here (default: a temporary folder)")
    options = _common.parse_options_or_run_child(parser, SMOKE, child)
    height, width = options.size
    with _common.workspace(options.workdir, "data_path_") as root:
        print(
            f"{height}x{width}, batch {options.batch}, {options.threads} thread(s), loader workers {options.workers}, "
            f"{options.epochs} epochs"
        )
        data = _common.prepare_dataset(root, options.count, height, width)
        for framework, placement in itertools.product(options.framework, options.placement):
            result = measure(framework, placement, options, data, root)
            meets = "meets" if result["wait_share"] <= TARGET_SHARE else "misses"
            verdict = "smoke: no verdict" if options.smoke else f"{meets} <= 5%"
            print(
                f"{framework} {placement}: data wait {100 * result['wait_share']:.2f}% of the steady epoch "
                f"({result['steady_epoch_s']:.1f} s, {result['images_per_epoch']} images; {verdict}); "
                f"loader alone {result['loader_images_per_s']:.1f} images/s, model consumes "
                f"{result['model_images_per_s']:.3f} images/s (loader/model {result['loader_over_model']:.0f}x)"
            )
            print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
