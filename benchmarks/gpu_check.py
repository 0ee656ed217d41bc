"""GPU check (issue 13): PyTorch cells on one real GPU, started through launch.py as the pipeline does.

Every cell is a real PyTorch DDP cell of the pipeline: synthetic data prepared as the
workflow prepares it, settings from config/schema.yaml's defaults, ranks started by
workflow/scripts/launch.py with the default local launcher (torchrun), records read from
the cell's run.json and metrics.jsonl. Pairs run side by side in one invocation, so their
ratios compare like with like:

  precision   fp32 vs bf16 vs fp16 at 768x1024 (images/s, MFU, peak memory)
  tf32        fp32 with TF32 (cuDNN's default) vs NVIDIA_TF32_OVERRIDE=0
  determinism training.deterministic true vs the GPU default (off, cuDNN autotuning)
  loader      DataLoader workers 0 vs 4 (data-wait share of the epoch)
  shared      two ranks sharing the one GPU (SCALEBENCH_SHARE_GPU=1, Gloo): functional only
  mfu         the cell's MFU against one computed from FLOPs counted by torch's
              FlopCounterMode and the cell's measured images/s
  harness     the cell against a bare loop written here (the same UNet, channels-last, Adam,
              BCE on logits, batch and precision, cuDNN autotuning; its batches copied from
              pinned host memory each step), per precision (fp32, bf16), placement (device,
              host) and eager/compiled, in one run; goals: device >= 0.95 of the bare loop,
              host >= 0.90, data wait <= 2% of the steady epoch with device
  collectives the collective benchmark of the cells (train/collectives.py) on one GPU: a one-rank
              NCCL all-reduce through torch.distributed, its latency over the sweep (NCCL's floor on
              this GPU) and at the gradient bytes of widths 1, 4 and 16 (one rank has no bus: its
              bus bandwidth is 0 by nccl-tests' definition, so only latency and algbw are figures)
  width       cells at model.width 1, 4 and 16 in bf16 (and 16 in fp32): step time, images/s, MFU
              and peak memory of the 0.49 M, 7.8 M and 124 M parameter models
  split       the step split of a one-GPU cell (CUDA events, train/torch/step_timing.py): no
              exposed communication to speak of (<= 2% of the steady epoch: one rank waits for
              nobody), compute near the steps' time, the parts adding up within the tolerance
              (records/); and a profile window whose trace holds CUDA kernels

It runs with the pipeline's Python (the cells' settings, launch.py), and everything that imports
torch (the cells' ranks, the bare loop, the collectives, FlopCounterMode, what torch sees of the
GPU) in torch's environment, which needs a CUDA build of torch (no TensorFlow or Horovod). It exits
non-zero if a cell fails or did not run on the GPU.

`--smoke` runs every check at 32x48 for 2 epochs and judges no speed goal (the harness ratios,
the split's exposed share): it checks that the checks run. Without a GPU it trains on the CPU
what needs none (CPU_CHECKS: cells through launch.py whose records are read as every check
reads them, and the collectives child on Gloo) and names the checks it skipped.

    .venv/bin/python benchmarks/gpu_check.py [--checks precision tf32 ... harness] [--epochs 4] [--images 96]
                                             [--size 768x1024] [--json results.json] [--workdir DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

CHECKS = ("precision", "tf32", "determinism", "loader", "shared", "mfu", "harness", "split", "collectives", "width")
WIDTHS = (1, 4, 16)
SPLIT_EXPOSED_GOAL = 0.02  # a one-GPU cell's exposed communication, share of the steady epoch
# harness goals: the cell's images/s over the bare loop's, per placement; the data wait with device
HARNESS_GOALS = {"device": 0.95, "host": 0.90}
DEVICE_WAIT_GOAL = 0.02
SMOKE = {"epochs": 2, "images": 10, "size": "32x48", "timeout": 300}
# what a smoke run without a GPU runs on the CPU: the others need CUDA (precisions, TF32, a shared
# GPU, a GPU's peak, the bare loop on the GPU, CUDA kernels in the trace, width 16's memory)
CPU_CHECKS = ("determinism", "collectives")
# the collectives child: the sweep up to 256 MiB; a smoke run's up to 64 KiB, widths 1 and 4
COLLECTIVES = {"widths": list(WIDTHS), "max_bytes": 2**28, "budget_s": 20.0, "iterations": 20, "warmup": 5}
COLLECTIVES_SMOKE = {"widths": list(WIDTHS[:2]), "max_bytes": 2**16, "budget_s": 2.0, "iterations": 2, "warmup": 1}


class CheckFailed(RuntimeError):
    """A cell failed or did not run where it had to."""


def torch_facts(args: dict) -> dict:
    """What torch sees (a child in torch's environment): whether it has a CUDA device, its version,
    and the GPU and its libraries where there is one."""
    import torch

    facts = {"cuda": torch.cuda.is_available(), "torch": torch.__version__, "gpu": None}
    if facts["cuda"]:
        props = torch.cuda.get_device_properties(0)
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        facts["gpu"] = (
            f"GPU {props.name} ({props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}), "
            f"{torch.cuda.device_count()} visible; torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}, NCCL {nccl}"
        )
    return facts


def gpu_line(device: str, facts: dict) -> str:
    """The GPU and its libraries; 'cpu' where a smoke run has none (any other run requires one)."""
    if device == "cpu":
        return f"no GPU (smoke run on the CPU); torch {facts['torch']}"
    if not facts["cuda"]:
        raise SystemExit("gpu_check: torch sees no CUDA device (torch.cuda.is_available() is False)")
    return facts["gpu"]


def counted_flops(args: dict) -> dict:
    """FlopCounterMode's count of one training step of one image (a child in torch's environment)."""
    from model_flops import counted_by_torch

    return {"flops": counted_by_torch(*args["size"])}


def run_cell(
    root: Path, name: str, data: Path, options, gpus: int = 1, env: dict | None = None, width: int = 1, **training
) -> dict:
    """One cell through launch.py; its run.json, epochs and final record, or CheckFailed."""
    training = {
        "epochs": options.epochs,
        "eval_every": 0,
        "checkpoint_every": 0,
        "predictions": 0,
        "device": options.device,
        **training,
    }
    settings = _common.cell_settings("torch", "native", gpus, options.size, options.images, **training)
    settings["model"] = {"width": width}
    out = root / name
    result = _common.launch_cell(settings, data, out, timeout=options.timeout, **(env or {}))
    log = (result.stdout + result.stderr)[-3000:]
    if result.returncode:
        raise CheckFailed(f"{name}: launch.py exited {result.returncode}:\n{log}")
    run = json.loads((out / "run.json").read_text())
    epochs, final = _common.read_metrics(out)
    if run.get("device") != options.device or final["status"] != "ok":
        raise CheckFailed(f"{name}: device {run.get('device')}, status {final['status']}:\n{log}")
    steady = epochs[1:] or epochs
    summary = {
        "name": name,
        "epoch_s": _common.median([e["epoch_time_s"] for e in steady]),
        "step_s": _common.median([e["epoch_time_s"] / e["optimizer_steps"] for e in steady]),
        "images_per_s": _common.median([e["images_per_s"] for e in steady]),
        "mfu": _common.median([e["mfu"] for e in steady]) if steady[0]["mfu"] is not None else None,
        "data_wait_share": _common.median([e["data_wait_s"] / e["epoch_time_s"] for e in steady]),
        "peak_mem_mb": max(e["peak_mem_mb"] for e in steady),
        "loss": epochs[-1]["loss"],
        "iou": final["iou"],
        "run": {
            key: run.get(key)
            for key in (
                "devices",
                "peak_device",
                "peak_precision",
                "peak_tflops",
                "tf32",
                "deterministic",
                "precision",
                "replicas",
                "shared_gpu",
                "model_flops_per_image",
                "model_width",
                "parameters",
                "gradient_bytes",
                "versions",
            )
        },
    }
    mfu = "-" if summary["mfu"] is None else f"{100 * summary['mfu']:.1f}%"
    print(
        f"  {name:<22} {summary['epoch_s']:7.3f} s/epoch  {summary['images_per_s']:8.1f} img/s  MFU {mfu:>6}  "
        f"data-wait {100 * summary['data_wait_share']:5.1f}%  peak {summary['peak_mem_mb']:7.0f} MB  "
        f"loss {summary['loss']:.4f}  [{run.get('peak_precision')}, tf32 {run.get('tf32')}, "
        f"deterministic {run.get('deterministic')}]",
        flush=True,
    )
    return summary


def ratio(a: dict, b: dict, key: str = "images_per_s") -> float:
    return a[key] / b[key]


def check_precision(root, data, options, results) -> None:
    fp32 = run_cell(root, "fp32", data, options)
    bf16 = run_cell(root, "bf16", data, options, precision="bf16")
    fp16 = run_cell(root, "fp16", data, options, precision="fp16")
    print(f"  bf16/fp32 images/s {ratio(bf16, fp32):.2f}, fp16/fp32 {ratio(fp16, fp32):.2f}", flush=True)
    results["precision"] = [fp32, bf16, fp16]


def check_tf32(root, data, options, results) -> None:
    on = run_cell(root, "fp32_tf32_on", data, options)
    off = run_cell(root, "fp32_tf32_off", data, options, env={"NVIDIA_TF32_OVERRIDE": "0"})
    if on["run"]["tf32"] is not True or off["run"]["tf32"] is not False:
        raise CheckFailed(f"run.json tf32: on {on['run']['tf32']}, off {off['run']['tf32']}")
    print(
        f"  TF32 on/off images/s {ratio(on, off):.2f} (peaks {on['run']['peak_tflops']} vs {off['run']['peak_tflops']})"
    )
    results["tf32"] = [on, off]


def check_determinism(root, data, options, results) -> None:
    default = run_cell(root, "deterministic_off", data, options)
    forced = run_cell(root, "deterministic_on", data, options, deterministic=True)
    print(f"  determinism off/on images/s {ratio(default, forced):.2f}", flush=True)
    results["determinism"] = [default, forced]


def check_loader(root, data, options, results) -> None:
    none = run_cell(root, "loader_workers_0", data, options, loader={"workers": 0})
    four = run_cell(root, "loader_workers_4", data, options, loader={"workers": 4})
    print(
        f"  data-wait share: workers 0 {100 * none['data_wait_share']:.1f}%, workers 4 "
        f"{100 * four['data_wait_share']:.1f}%; images/s 4/0 {ratio(four, none):.2f}",
        flush=True,
    )
    results["loader"] = [none, four]


def check_shared(root, data, options, results) -> None:
    shared = run_cell(root, "two_ranks_one_gpu", data, options, gpus=2, env={"SCALEBENCH_SHARE_GPU": "1"})
    run = shared["run"]
    if run["replicas"] != 2 or not run["shared_gpu"] or len(run["devices"] or []) != 2:
        raise CheckFailed(f"two ranks sharing the GPU: run.json says {run}")
    print("  two ranks on one GPU trained to the end through torchrun and Gloo (functional only)", flush=True)
    results["shared"] = [shared]


def check_mfu(root, data, options, results) -> None:
    cell = (results.get("precision") or [run_cell(root, "fp32", data, options)])[0]
    peak, reported = cell["run"]["peak_tflops"], cell["mfu"]
    if peak is None or reported is None:
        raise CheckFailed(f"no peak for {cell['run']['devices']}: add it to cluster.peak_tflops")
    script = str(Path(__file__).resolve())
    counted = _common.run_child(script, "flops", {"size": options.size}, timeout=options.timeout, framework="torch")
    counted = counted["flops"]
    independent = cell["images_per_s"] * counted / 1e12 / peak
    print(
        f"  MFU {100 * reported:.2f}% (model FLOPs {cell['run']['model_flops_per_image'] / 1e9:.2f} GFLOP/image); "
        f"from FlopCounterMode ({counted / 1e9:.2f} GFLOP/image) and the measured images/s {100 * independent:.2f}%; "
        f"ratio {reported / independent:.4f}",
        flush=True,
    )
    results["mfu"] = {"reported": reported, "counted": independent, "counted_flops_per_image": counted}


def bare_loop(args: dict) -> dict:
    """The same training written plainly: the UNet, channels-last, Adam, BCE on logits, autocast,
    cuDNN autotuning; each step's batch copied from pinned host memory. Images/s per epoch."""
    import time

    import numpy as np
    import torch
    import torch.nn.functional as F
    from scalebench.data.preprocess import load_arrays
    from scalebench.train.torch.model import UNet

    torch.manual_seed(1)
    torch.backends.cudnn.benchmark = True
    device, batch = torch.device("cuda", 0), args["batch"]
    images, masks, manifest = load_arrays(args["data"])
    train = manifest["train"]
    steps = len(train) // batch
    pinned = []  # one epoch of float32 batches in page-locked memory
    for step in range(steps):
        rows = sorted(train[step * batch : (step + 1) * batch])
        x = torch.from_numpy(np.asarray(images[rows], dtype=np.float32) / 255.0).unsqueeze(1)
        y = torch.from_numpy(np.asarray(masks[rows], dtype=np.float32)).unsqueeze(1)
        pinned.append(tuple(t.contiguous(memory_format=torch.channels_last).pin_memory() for t in (x, y)))
    model = UNet().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
    forward = torch.compile(model) if args["compile"] else model
    dtype = {"bf16": torch.bfloat16, "fp32": None}[args["precision"]]
    times = []
    for _ in range(args["epochs"]):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for x, y in pinned:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                logits = forward(x)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return {"images_per_s": _common.median([steps * batch / t for t in times[1:]])}


def check_harness(root, data, options, results) -> None:
    script, failures, rows = str(Path(__file__).resolve()), [], []
    for precision in ("fp32", "bf16"):
        for compiled in (False, True):
            args = {"data": str(data), "batch": 4, "epochs": options.epochs, "precision": precision}
            bare = _common.run_child(
                script, "bare", {**args, "compile": compiled}, timeout=options.timeout, framework="torch"
            )
            mode = "compiled" if compiled else "eager"
            print(f"  bare loop {precision} {mode}: {bare['images_per_s']:.1f} img/s", flush=True)
            for placement, goal in HARNESS_GOALS.items():
                name = f"harness_{precision}_{mode}_{placement}"
                cell = run_cell(
                    root, name, data, options, precision=precision, compile=compiled, loader={"placement": placement}
                )
                share = cell["images_per_s"] / bare["images_per_s"]
                verdict = "meets" if share >= goal else "MISSES"
                print(f"    {placement}: {share:.3f} of the bare loop ({verdict} >= {goal})", flush=True)
                if share < goal and not options.smoke:
                    failures.append(f"{name}: {share:.3f} < {goal}")
                if placement == "device" and cell["data_wait_share"] > DEVICE_WAIT_GOAL and not options.smoke:
                    failures.append(f"{name}: data wait {100 * cell['data_wait_share']:.1f}% > 2%")
                rows.append({"cell": cell, "bare": bare, "ratio": share, "placement": placement})
    results["harness"] = rows
    if failures:
        raise CheckFailed("; ".join(failures))


def collectives_child(args: dict) -> dict:
    """A one-rank NCCL process group on GPU 0 through the cells' own benchmark code: the sweep with
    width 1's gradients, then each other width's gradient size alone. (args["device"] cpu: Gloo on
    the CPU, to check this code on a machine without a GPU.)"""
    import numpy as np
    import torch
    import torch.distributed as dist
    from scalebench import architecture
    from scalebench.cluster.ports import free_port
    from scalebench.settings import CollectiveSettings
    from scalebench.train import collectives
    from scalebench.train.torch import collectives as torch_collectives

    on_gpu = args.get("device", "cuda") == "cuda"
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    group = "nccl" if on_gpu else "gloo"
    dist.init_process_group(group, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    rows = []
    try:
        for width in args["widths"]:
            max_bytes = args["max_bytes"] if width == args["widths"][0] else collectives.ITEMSIZE
            settings = CollectiveSettings(args["budget_s"], max_bytes, args["iterations"], args["warmup"])
            bench = torch_collectives.process_group(device, ("all_reduce",), None, "")
            result = collectives.measure(bench, settings, 1, 0, architecture.gradient_bytes(width), np.asarray)
            rows += [
                row | {"width": width} for row in result.rows if width == args["widths"][0] or row["size"] == "gradient"
            ]
    finally:
        dist.destroy_process_group()
    version = ".".join(map(str, torch.cuda.nccl.version())) if on_gpu else ""
    return {"library": f"torch.distributed {group} {version}".strip(), "rows": rows}


def check_collectives(root, data, options, results) -> None:
    args = {**(COLLECTIVES_SMOKE if options.smoke else COLLECTIVES), "device": options.device}
    script = str(Path(__file__).resolve())
    measured = _common.run_child(script, "collectives", args, timeout=options.timeout, framework="torch")
    rows = [row for row in measured["rows"] if row["latency_us"] is not None]
    if not rows:
        raise CheckFailed(f"no size measured: {[row['reason'] for row in measured['rows']][:3]}")
    sweep = [row for row in rows if row["size"] == "sweep"]
    floor = min(row["latency_us"] for row in sweep)
    print(f"  {measured['library']}, one rank: latency floor {floor:.1f} us over {len(sweep)} sizes", flush=True)
    for row in rows:
        if row["size"] == "gradient":
            print(
                f"    width {row['width']:>2}: all-reduce of {row['bytes'] / 2**20:8.1f} MiB in {row['latency_us']:9.1f} us "
                f"(algbw {row['algbw_gbps']:.1f} GB/s; one rank: no bus)",
                flush=True,
            )
    results["collectives"] = measured


def check_width(root, data, options, results) -> None:
    cells = [run_cell(root, f"width{w}_bf16", data, options, width=w, precision="bf16") for w in WIDTHS]
    cells.append(run_cell(root, f"width{WIDTHS[-1]}_fp32", data, options, width=WIDTHS[-1]))
    for cell in cells:
        run = cell["run"]
        if run["model_width"] is None or run["parameters"] is None:
            raise CheckFailed(f"{cell['name']}: run.json lacks model_width or parameters")
        mfu = "-" if cell["mfu"] is None else f"{100 * cell['mfu']:.1f}%"
        print(
            f"  width {run['model_width']:>2} ({run['parameters'] / 1e6:6.2f} M parameters, {run['peak_precision']}): "
            f"{1000 * cell['step_s']:8.1f} ms/step, {cell['images_per_s']:7.1f} img/s, MFU {mfu}, "
            f"peak {cell['peak_mem_mb'] / 1024:5.1f} GiB",
            flush=True,
        )
    results["width"] = cells


def check_split(root, data, options, results) -> None:
    from scalebench.records import REST_TOLERANCE_S, REST_TOLERANCE_SHARE

    run_cell(root, "split", data, options, profile={"epoch": 2, "steps": 3})
    out = root / "split"
    epochs, _ = _common.read_metrics(out)
    steady = [e for e in epochs[1:] if not e["profiled"]] or epochs[1:]
    share = {
        part: _common.median([e[field] / e["epoch_time_s"] for e in steady])
        for part, field in (("compute", "compute_s"), ("exposed", "comm_exposed_s"), ("wait", "data_wait_median_s"))
    }
    share["rest"] = _common.median([e["rest_s"] / e["epoch_time_s"] for e in steady])
    compute_of_steps = _common.median([e["compute_s"] / (e["compute_s"] + e["comm_exposed_s"]) for e in steady])
    trace = json.loads((out / "profile" / "rank0.pt.trace.json").read_text())
    kernels = sum(event.get("cat") == "kernel" for event in trace["traceEvents"])
    print(
        f"  steady epoch: compute {100 * share['compute']:.1f}%, exposed communication {100 * share['exposed']:.2f}%, "
        f"data wait {100 * share['wait']:.1f}%, rest {100 * share['rest']:.2f}%; compute / steps "
        f"{compute_of_steps:.3f}; trace of epoch 2: {kernels} CUDA kernel events",
        flush=True,
    )
    results["split"] = {"shares": share, "compute_of_steps": compute_of_steps, "trace_kernels": kernels}
    failures = []
    if share["exposed"] > SPLIT_EXPOSED_GOAL and not options.smoke:
        failures.append(f"exposed communication {100 * share['exposed']:.2f}% of a one-GPU epoch")
    for epoch in epochs:
        for rank in epoch["ranks"]:
            if rank["rest_s"] < -(REST_TOLERANCE_SHARE * rank["epoch_time_s"] + REST_TOLERANCE_S):
                failures.append(f"epoch {epoch['epoch']}: the parts exceed the epoch ({rank['rest_s']:.4f} s rest)")
    if not kernels:
        failures.append("the profile window's trace holds no CUDA kernel")
    if failures:
        raise CheckFailed("; ".join(failures))


# what runs in a process of torch's environment
CHILDREN = {"bare": bare_loop, "collectives": collectives_child, "torch": torch_facts, "flops": counted_flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS))
    parser.add_argument("--epochs", type=int, default=4, help="epochs per cell; the first is warm-up (default 4)")
    parser.add_argument("--images", type=int, default=96, help="synthetic image pairs (default 96)")
    parser.add_argument("--size", default="768x1024", help="HxW of the prepared images (default 768x1024)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one cell may take (default 600)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--workdir", help="keep data and cells here (default: a temporary folder)")
    # the bare loop, the one-rank collectives, FlopCounterMode or torch's view of the GPU, in a process of their own
    options = _common.parse_options_or_run_child(
        parser, SMOKE, lambda mode, args: print(json.dumps(CHILDREN[mode](args), default=str))
    )
    options.size = tuple(int(part) for part in options.size.split("x"))
    options.device = "cuda"
    facts = _common.run_child(str(Path(__file__).resolve()), "torch", {}, timeout=options.timeout, framework="torch")
    if options.smoke and not facts["cuda"]:
        skipped = [name for name in options.checks if name not in CPU_CHECKS]
        options.checks = [name for name in options.checks if name in CPU_CHECKS]
        options.device = "cpu"
        print(f"gpu_check: no CUDA device: a smoke run on the CPU; skipped (they need a GPU): {', '.join(skipped)}")
    results: dict = {
        "gpu": gpu_line(options.device, facts),
        "options": {k: v for k, v in vars(options).items() if k != "json"},
    }
    print(results["gpu"], flush=True)
    failed = []
    with _common.workspace(options.workdir, "gpu_check_") as root:
        data = _common.prepare_dataset(root, options.images, *options.size)
        for name in options.checks:
            print(f"== {name}", flush=True)
            try:
                globals()[f"check_{name}"](root, data, options, results)
            except CheckFailed as error:
                print(f"  FAILED: {error}", flush=True)
                failed.append(name)
            results["failed"] = failed
            if options.json:  # after every check, so a run cut off at a time limit keeps what it measured
                Path(options.json).write_text(json.dumps(results, indent=2, default=str))
    if failed:
        raise SystemExit(f"gpu_check: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
