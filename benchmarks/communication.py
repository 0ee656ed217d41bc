"""Benchmark: what the gradient reduction costs on the CPU, 2 ranks against 1 (issue 7, item 4).

Weak scaling: every rank trains the same per-rank batch and the same number of steps per
epoch (training.dataset_repeat = ranks, so each rank's shard is the whole training set), so
the ideal ratio of steady-state epoch times (2 ranks / 1 rank) is 1.0. One compute thread per
rank (training.threads_per_rank: 1; launch.py also sets OMP_NUM_THREADS and TF's intra-op
threads to it), so on a 2-core machine the two ranks have one core each, like the single rank.
Cells start through workflow/scripts/launch.py with the default local launchers (torchrun,
horovod_run.py: horovodrun --gloo without its probe), as the train rule starts them: launch.py with
the pipeline's Python, which this benchmark runs with, the ranks in their framework's environment.

Where the framework can tell, the share of the time in the reduction:
- Horovod (both frameworks): HOROVOD_TIMELINE; the union of the ALLREDUCE intervals of every
  tensor (after negotiation, i.e. after all ranks are ready) over the summed epoch times, and
  the same for NEGOTIATE_ALLREDUCE (a tensor is ready on one rank and waits for the other).
- PyTorch DDP: a probe in this file, started by torch's torchrun (in torch's environment) with
  2 ranks on the same UNet and arrays, times each bucket's allreduce future from launch to completion with a DDP comm hook,
  and compares steps with the reduction against steps under no_sync() (no reduction).
TensorFlow's MultiWorkerMirroredStrategy exposes no such hook; its row has the epoch ratio only.
A backend that cannot run 1 rank (fsdp) is compared with its framework's native backend on 1
rank, and its line says so; mirrored's 2 replicas are logical CPU devices in one process.

The cells run without the collective benchmark (training.collectives.budget_s: 0): its
all-reduces, before the first epoch, would count in Horovod's timeline.

    .venv/bin/python benchmarks/communication.py [--backends torch_native torch_horovod ...] [--epochs 4] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)


def cpu_backends() -> list[str]:
    """Every registered framework_backend that can run 2 CPU ranks (dp has one device on the CPU)."""
    from scalebench import backends

    return [
        f"{framework}_{name}"
        for framework, specs in backends.REGISTRY.items()
        for name, spec in specs.items()
        if spec.cpu_devices is None or spec.cpu_devices >= 2
    ]


BACKENDS = cpu_backends()
# The DDP probe and Horovod's timeline: the benchmark's own code paths. Every backend's cells run the
# same code with other settings (Horovod's the timeline on top), so a smoke run trains Horovod's alone
# and probes DDP beside them.
SMOKE = {
    "backends": ["torch_horovod"],
    "epochs": 2,
    "size": [32, 48],
    "count": 10,
    "batch": 2,
    "probe_steps": 1,
}


def merged_length(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def timeline_phase_s(path: Path, phase: str) -> tuple[float, int]:
    """(seconds during which some tensor was in `phase`, number of such phases) from a Horovod timeline.

    Each tensor is a `pid` with nested B/E events (ALLREDUCE holds activities such as
    MEMCPY_IN_FUSION_BUFFER and GLOO_ALLREDUCE; E events carry no name), so a stack per
    tensor pairs every E with its own B.
    """
    text = path.read_text().strip()
    if not text.endswith("]"):  # Horovod leaves the JSON array open while it runs
        text = text.rstrip(",") + "]"
    stacks: dict[int, list[tuple[str | None, float]]] = {}
    intervals = []
    for event in json.loads(text):
        if event.get("ph") == "B":
            stacks.setdefault(event["pid"], []).append((event.get("name"), event["ts"]))
        elif event.get("ph") == "E" and stacks.get(event["pid"]):
            name, started = stacks[event["pid"]].pop()
            if name == phase:
                intervals.append((started, event["ts"]))
    return merged_length(intervals) / 1e6, len(intervals)


def ddp_probe(args: dict) -> dict:
    """One rank of the DDP probe (started by torchrun): allreduce futures timed by a comm hook.
    Each rank writes its result to its own file in args["out"] (both ranks printing to one pipe
    can interleave their lines)."""
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from scalebench.data.preprocess import load_arrays
    from scalebench.train.torch.model import UNet
    from scalebench.train.torch.runtime import LAYOUT

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(UNet().to(memory_format=LAYOUT))
    durations: list[float] = []

    def timed_allreduce(state, bucket):
        started = time.perf_counter()
        future = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()

        def finished(done):
            durations.append(time.perf_counter() - started)
            return done.value()[0]

        return future.then(finished)

    model.register_comm_hook(None, timed_allreduce)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
    images, masks, manifest = load_arrays(args["data"])
    train, batch = manifest["train"], args["batch"]
    rng = np.random.default_rng(rank)

    def step(sync: bool) -> float:
        index = sorted(rng.choice(train, batch, replace=False).tolist())
        x = torch.from_numpy(np.asarray(images[index], dtype=np.float32) / 255.0).unsqueeze(1)
        y = torch.from_numpy(np.asarray(masks[index], dtype=np.float32)).unsqueeze(1)
        x, y = x.contiguous(memory_format=LAYOUT), y.contiguous(memory_format=LAYOUT)
        started = time.perf_counter()
        if sync:
            loss = F.binary_cross_entropy_with_logits(model(x), y)
            optimizer.zero_grad()
            loss.backward()
        else:
            with model.no_sync():
                loss = F.binary_cross_entropy_with_logits(model(x), y)
                optimizer.zero_grad()
                loss.backward()
        optimizer.step()
        return time.perf_counter() - started

    for _ in range(2):
        step(True)
    durations.clear()  # the hook fires only in steps with the reduction
    synced, local = [], []
    for _ in range(args["blocks"]):
        for sync, times in ((True, synced), (False, local)):
            dist.barrier()
            times.extend(step(sync) for _ in range(args["steps"]))
    result = {
        "rank": rank,
        "step_sync_s": float(np.median(synced)),
        "step_no_sync_s": float(np.median(local)),
        "allreduce_s_per_step": sum(durations) / len(synced),
        "buckets_per_step": len(durations) / len(synced),
    }
    dist.destroy_process_group()
    (Path(args["out"]) / f"probe_rank{rank}.json").write_text(json.dumps(result))
    return result


def single_rank_base(backend: str) -> str:
    """The 1-rank cell a backend's 2 ranks are compared with: its own, or its framework's native one."""
    from scalebench import backends

    framework, name = backend.split("_")
    return backend if backends.spec(framework, name).min_ranks <= 1 else f"{framework}_native"


def run_cell(backend: str, ranks: int, options: argparse.Namespace, data: Path, root: Path) -> dict:
    framework, kind = backend.split("_")
    height, width = options.size
    settings = _common.cell_settings(
        framework,
        kind,
        ranks,
        (height, width),
        options.count,
        epochs=options.epochs,
        batch_per_gpu=options.batch,
        threads_per_rank=1,
        dataset_repeat=ranks,
        predictions=0,
        checkpoint_every=0,
        collective_timeout_s=120,
        loader={"workers": 0},
        collectives={"budget_s": 0},
    )
    out = root / f"{backend}_g{ranks}"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(options.env)
    timeline = out / "horovod_timeline.json"
    if kind == "horovod":
        env["HOROVOD_TIMELINE"] = str(timeline)
    result = _common.launch_cell(settings, data, out, timeout=options.timeout, **env)
    if result.returncode:
        raise RuntimeError(f"{backend} on {ranks} ranks failed ({result.returncode}):\n{result.stdout[-3000:]}")
    epochs, _ = _common.read_metrics(out)
    times = [r["epoch_time_s"] for r in epochs]
    measured = {"epoch_times": times, "steady_s": _common.steady_epoch_s(times), "steps": epochs[-1]["steps"]}
    if kind == "horovod" and timeline.exists():
        busy, count = timeline_phase_s(timeline, "ALLREDUCE")
        waiting, _ = timeline_phase_s(timeline, "NEGOTIATE_ALLREDUCE")
        measured.update(
            allreduce_s=busy,
            allreduces=count,
            allreduce_share=busy / sum(times),
            negotiate_share=waiting / sum(times),
        )
    return measured


def run_ddp_probe(options: argparse.Namespace, data: Path, root: Path) -> list[dict]:
    out = root / "ddp_probe"
    out.mkdir(parents=True, exist_ok=True)
    args = {"data": str(data), "batch": options.batch, "steps": options.probe_steps, "blocks": 3, "out": str(out)}
    command = [
        _common.framework_tool("torch", "torchrun"),
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={_free_port()}",
        str(Path(__file__).resolve()),
        "--child",
        "ddp-probe",
        "--args",
        json.dumps(args),
    ]
    env = _common.single_process_env("torch", OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout, env=env)
    if result.returncode:
        raise RuntimeError(f"DDP probe failed:\n{result.stderr[-3000:]}")
    return [json.loads((out / f"probe_rank{rank}.json").read_text()) for rank in range(2)]


def _free_port() -> int:
    from scalebench.train import rank_env

    return rank_env.free_port()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=BACKENDS)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per cell; the first is warm-up (default 4)")
    parser.add_argument("--size", type=int, nargs=2, default=[128, 128], metavar=("H", "W"))
    parser.add_argument("--count", type=int, default=30, help="synthetic pairs (default 30: 24 train)")
    parser.add_argument("--batch", type=int, default=4, help="training.batch_per_gpu (default 4)")
    parser.add_argument("--probe-steps", type=int, default=4, help="steps per block of the DDP probe (default 4)")
    parser.add_argument("--no-probe", action="store_true", help="skip the DDP comm-hook probe")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--env",
        nargs="+",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        metavar="KEY=VALUE",
        help="extra environment of every cell, e.g. HOROVOD_CYCLE_TIME=10",
    )
    parser.add_argument("--workdir", help="keep data and records here (default: a temporary folder)")
    options = _common.parse_options_or_run_child(parser, SMOKE, lambda mode, args: ddp_probe(args))
    height, width = options.size
    with _common.workspace(options.workdir, "communication_") as root:
        print(
            f"{height}x{width}, batch {options.batch} per rank, 1 thread per rank, dataset_repeat = ranks "
            f"(same steps per rank), {options.epochs} epochs"
        )
        data = _common.prepare_dataset(root, options.count, height, width)
        results = {}
        for backend in options.backends:
            base = single_rank_base(backend)
            one, two = run_cell(base, 1, options, data, root), run_cell(backend, 2, options, data, root)
            results[backend] = {"1": one, "2": two, "ratio": two["steady_s"] / one["steady_s"], "base": base}
            line = (
                f"{backend}: steady epoch 1 rank {one['steady_s']:.2f} s"
                + ("" if base == backend else f" ({base})")
                + f", 2 ranks {two['steady_s']:.2f} s "
                f"({two['steps'] // 2} steps of {options.batch} per rank), ratio {results[backend]['ratio']:.3f}"
            )
            if "allreduce_share" in two:
                line += (
                    f"; allreduce busy {two['allreduce_s']:.2f} s over {two['allreduces']} tensor allreduces, "
                    f"{100 * two['allreduce_share']:.1f}% of the epoch time (1 rank: "
                    f"{100 * one.get('allreduce_share', 0):.1f}%); some tensor negotiating (waiting for a rank) "
                    f"{100 * two['negotiate_share']:.1f}% (1 rank: {100 * one.get('negotiate_share', 0):.1f}%)"
                )
            print(line + f"  load {_common.load_average():.2f}", flush=True)
        if ("torch_native" in options.backends or options.smoke) and not options.no_probe:
            probe = run_ddp_probe(options, data, root)
            for rank in probe:
                share = 1 - rank["step_no_sync_s"] / rank["step_sync_s"]
                print(
                    f"DDP probe rank {rank['rank']}: step {rank['step_sync_s']:.3f} s with the allreduce, "
                    f"{rank['step_no_sync_s']:.3f} s under no_sync ({100 * share:.1f}% of the step); "
                    f"allreduce futures {rank['allreduce_s_per_step'] * 1e3:.1f} ms per step "
                    f"({rank['buckets_per_step']:.0f} buckets, overlapping backward)"
                )
            results["ddp_probe"] = probe
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
