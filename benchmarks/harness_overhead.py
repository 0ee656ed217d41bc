"""Benchmark: the project's training loop against a bare loop over the same arrays and UNet (issue 7, items 1 and 6).

Harness: scalebench.train.loop.TrainingLoop with the native backend (DDP, or MultiWorkerMirrored),
in one process without launcher variables, so rank_env.detect() makes it rank 0 of 1; settings
from scalebench.config.train_settings on a validated config. Bare: the same UNet, loss, Adam and
arrays in a plain loop written here (no sampler, DataLoader, metrics, DDP or checkpoint).
Harness and bare runs alternate, each in a fresh process; the figure is the ratio of the
medians of their steady-state epoch times (median of the epochs after the first). The benchmark
runs with the pipeline's Python (the validated settings); each run with its framework's.

    .venv/bin/python benchmarks/harness_overhead.py --framework torch [--runs 5] [--epochs 4] [--placement host]
    .venv/bin/python benchmarks/harness_overhead.py --framework tensorflow
    .venv/bin/python benchmarks/harness_overhead.py --smoke     # torch, 1 run of 2 epochs at 32x48
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

TARGET = 1.02
# One framework: measure() is the same code for both, and the smoke runs of framework_parity.py
# (tf_bare, at these settings) and data_path.py (harness() on a TensorFlow cell) run the rest.
SMOKE = {"framework": ["torch"], "runs": 1, "epochs": 2, "size": [32, 48], "count": 10, "batch": 2}


def bare_order(train: list[int], epoch: int) -> list[int]:
    import numpy as np

    return np.random.default_rng(epoch).permutation(train).tolist()


def torch_bare(args: dict) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from scalebench.data.preprocess import load_arrays
    from scalebench.train.torch.model import UNet
    from scalebench.train.torch.runtime import LAYOUT, set_determinism

    torch.set_num_threads(args["threads"])
    torch.manual_seed(1)
    if args.get("determinism"):  # what the harness adds
        set_determinism(1, deterministic=True)
    images, masks, manifest = load_arrays(args["data"])
    train, batch = manifest["train"] * args["repeat"], args["batch"]
    # The harness's layout (channels-last) unless a parity variant asks for PyTorch's default NCHW.
    layout = torch.contiguous_format if args.get("nchw") else LAYOUT
    model = UNet().to(memory_format=layout)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
    model.train()
    times = []
    for epoch in range(args["epochs"]):
        order = bare_order(train, epoch)
        started = time.perf_counter()
        for step in range(len(order) // batch):
            index = sorted(order[step * batch : (step + 1) * batch])
            x = torch.from_numpy(np.asarray(images[index], dtype=np.float32) / 255.0).unsqueeze(1)
            y = torch.from_numpy(np.asarray(masks[index], dtype=np.float32)).unsqueeze(1)
            x, y = x.contiguous(memory_format=layout), y.contiguous(memory_format=layout)
            loss = F.binary_cross_entropy_with_logits(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        times.append(time.perf_counter() - started)
    return {"epoch_times": times, "images_per_epoch": len(order) // batch * batch}


def tf_bare(args: dict) -> dict:
    import numpy as np
    import scalebench.train.tf  # noqa: F401  (the harness's environment: oneDNN on unless exported)

    # isort: split
    import tensorflow as tf
    import tf_keras as keras
    from scalebench.data.preprocess import load_arrays
    from scalebench.train.tf.model import build_unet

    tf.config.threading.set_intra_op_parallelism_threads(args["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(1)
    if args.get("determinism"):  # what train/tf/runtime.set_determinism adds in the harness
        tf.config.experimental.enable_op_determinism()
    images, masks, manifest = load_arrays(args["data"])
    train, batch = manifest["train"] * args["repeat"], args["batch"]
    model = build_unet(images.shape[1:])
    optimizer = keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-8)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=model(x, training=True)))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    times = []
    for epoch in range(args["epochs"]):
        order = bare_order(train, epoch)
        started = time.perf_counter()
        loss = None
        for number in range(len(order) // batch):
            index = sorted(order[number * batch : (number + 1) * batch])
            x = np.asarray(images[index], dtype=np.float32)[..., None] / np.float32(255.0)
            y = np.asarray(masks[index], dtype=np.float32)[..., None]
            loss = step(x, y)
        float(loss)  # the last step has finished before the clock is read
        times.append(time.perf_counter() - started)
    return {"epoch_times": times, "images_per_epoch": len(order) // batch * batch}


def harness(args: dict, framework: str) -> dict:
    """The project's loop in this process, rank 0 of 1, writing its records into args['out']."""
    from scalebench.settings import ProcessFacts, RunSettings
    from scalebench.train import rank_env
    from scalebench.train.entry import build_rank, cell_hash
    from scalebench.train.faults import NO_FAULTS
    from scalebench.train.loop import TrainingLoop

    started = time.perf_counter()
    settings = args["settings"]
    run = RunSettings.from_json(settings, args["data"], args["out"])
    process = ProcessFacts.of_rank(run, os.environ)
    spec, device, backend = build_rank(run, process, rank_env.detect())
    try:
        # as a rank of the project's: no fault planted, its threads left where they are (not bound)
        loop = TrainingLoop(
            run,
            spec,
            device,
            backend,
            process,
            cell_hash(settings, args["data"]),
            started,
            faults=NO_FAULTS,
            cpu_binding=None,
        )
        status = loop.train()
    finally:
        backend.shutdown()
    wall = time.perf_counter() - started
    epochs, final = _common.read_metrics(Path(args["out"]))
    return {
        "status": status,
        "epoch_times": [r["epoch_time_s"] for r in epochs],
        "images_per_s": [r["images_per_s"] for r in epochs],
        "data_wait_s": [r["data_wait_s"] for r in epochs],
        "model_tflops": [r.get("model_tflops") for r in epochs],
        "images_per_epoch": epochs[-1]["steps"] * settings["training"]["batch_per_gpu"],
        # Wall time after setup, less the final test and the timed epochs: what each epoch costs
        # outside its own clock (records, learning rate, dataset construction, checkpoints).
        "untimed_s": wall - final["setup_s"] - (final["test_time_s"] or 0.0) - sum(r["epoch_time_s"] for r in epochs),
    }


def child(mode: str, args: dict) -> None:
    if mode.startswith("tensorflow"):
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    functions = {
        "torch-bare": torch_bare,
        "tensorflow-bare": tf_bare,
        "torch-harness": lambda a: harness(a, "torch"),
        "tensorflow-harness": lambda a: harness(a, "tensorflow"),
    }
    print(json.dumps(functions[mode](args)))


def measure(framework: str, options: argparse.Namespace, root: Path) -> dict:
    from scalebench.train import flops

    height, width = options.size
    data = _common.prepare_dataset(root, options.count, height, width)
    settings = _common.cell_settings(
        framework,
        "native",
        1,
        (height, width),
        options.count,
        epochs=options.epochs,
        batch_per_gpu=options.batch,
        threads_per_rank=options.threads,
        dataset_repeat=options.repeat,
        predictions=0,
        collective_timeout_s=120,
        loader={"workers": 0, "placement": options.placement},
    )
    script = str(Path(__file__).resolve())
    harness_runs, bare_runs = [], []
    for run in range(options.runs):
        out = root / f"{framework}_harness_{run}"
        out.mkdir(parents=True, exist_ok=True)
        harness_runs.append(
            _common.run_child(
                script,
                f"{framework}-harness",
                {"settings": settings, "data": str(data), "out": str(out)},
                framework=framework,
            )
        )
        bare_args = {"data": str(data), "epochs": options.epochs, "batch": options.batch, "threads": options.threads}
        bare_runs.append(
            _common.run_child(script, f"{framework}-bare", {**bare_args, "repeat": options.repeat}, framework=framework)
        )
        h, b = (_common.steady_epoch_s(r["epoch_times"]) for r in (harness_runs[-1], bare_runs[-1]))
        print(
            f"  run {run + 1}: harness {h:.3f} s  bare {b:.3f} s  ratio {h / b:.3f}  load {_common.load_average():.2f}",
            flush=True,
        )
    harness_steady = _common.median([_common.steady_epoch_s(r["epoch_times"]) for r in harness_runs])
    bare_steady = _common.median([_common.steady_epoch_s(r["epoch_times"]) for r in bare_runs])
    images = harness_runs[0]["images_per_epoch"]
    if images != bare_runs[0]["images_per_epoch"]:
        raise RuntimeError(
            f"harness trains {images} images per epoch, the bare loop {bare_runs[0]['images_per_epoch']}"
        )
    per_image = flops.train_flops_per_image(height, width)
    untimed = _common.median([r["untimed_s"] / options.epochs for r in harness_runs])
    return {
        "framework": framework,
        "harness_steady_s": harness_steady,
        "bare_steady_s": bare_steady,
        "ratio": harness_steady / bare_steady,
        "pair_ratios": [
            _common.steady_epoch_s(h["epoch_times"]) / _common.steady_epoch_s(b["epoch_times"])
            for h, b in zip(harness_runs, bare_runs)
        ],
        "untimed_per_epoch_s": untimed,
        "images_per_epoch": images,
        "flops_per_image": per_image,
        "harness_tflops": images / harness_steady * per_image / 1e12,
        "bare_tflops": images / bare_steady * per_image / 1e12,
        "recorded_model_tflops": harness_runs[-1]["model_tflops"],
        "data_wait_share": _common.median(
            [w / t for r in harness_runs for w, t in zip(r["data_wait_s"][1:], r["epoch_times"][1:])]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "tensorflow"], nargs="+", default=["torch"])
    parser.add_argument("--runs", type=int, default=5, help="alternating harness/bare pairs (default 5)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run; the first is warm-up (default 4)")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    parser.add_argument("--count", type=int, default=20, help="synthetic pairs (80%% train; default 20)")
    parser.add_argument("--repeat", type=int, default=1, help="training.dataset_repeat (default 1)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="compute threads (training.threads_per_rank)")
    parser.add_argument(
        "--placement", choices=["device", "host"], default="device", help="training.loader.placement (default device)"
    )
    parser.add_argument("--workdir", help="keep data and records here (default: a temporary folder)")
    options = _common.parse_options_or_run_child(parser, SMOKE, child)
    with _common.workspace(options.workdir, "harness_overhead_") as root:
        print(
            f"{options.size[0]}x{options.size[1]}, batch {options.batch}, {options.threads} thread(s), "
            f"placement {options.placement}, "
            f"{options.runs} alternating runs x {options.epochs} epochs"
        )
        for framework in options.framework:
            print(f"{framework}:", flush=True)
            result = measure(framework, options, root)
            meets = "meets" if result["ratio"] <= TARGET else "misses"
            verdict = "smoke: no verdict" if options.smoke else f"{meets} <= {TARGET}"
            print(
                f"{framework}: harness {result['harness_steady_s']:.3f} s/epoch, bare {result['bare_steady_s']:.3f} s/epoch "
                f"({result['images_per_epoch']} images), ratio {result['ratio']:.3f} ({verdict}); "
                f"per-pair ratios {', '.join(f'{r:.3f}' for r in result['pair_ratios'])}"
            )
            print(
                f"{framework}: outside the epoch clock (records, checkpoint) {result['untimed_per_epoch_s']:.3f} s per epoch "
                f"(= {result['untimed_per_epoch_s'] / result['bare_steady_s']:.3f} of a bare epoch); "
                f"data wait {100 * result['data_wait_share']:.1f}% of the epoch"
            )
            print(
                f"{framework}: {result['flops_per_image'] / 1e9:.2f} GFLOP per image (fwd+bwd); achieved "
                f"{result['harness_tflops'] * 1e3:.1f} GFLOP/s harness, {result['bare_tflops'] * 1e3:.1f} GFLOP/s bare; "
                f"recorded model_tflops {result['recorded_model_tflops']}"
            )
            print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
