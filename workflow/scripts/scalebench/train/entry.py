"""Entry point of one rank: read the settings, pick the framework and backend, train.

    python workflow/scripts/train.py --settings JSON --data DIR --out DIR

The launcher (torchrun, srun or horovodrun; see scalebench/launch) starts one
of these per rank. Every rank runs the same code; rank 0 writes the records.
The framework and the backend are imported here by name, so a rank of one
framework never imports the other: the framework's spec (train/<framework>/spec.py)
from FRAMEWORK_PACKAGES, the backend's module as its registry entry names it
(scalebench/backends.py, modules). Here the rank binds its cores, reads the test faults of
SCALEBENCH_FAULT once (faults.FaultPlan), and builds its device and its backend (which joins the
ranks); the loop, handed the binding and the faults, builds the rest from the spec.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from scalebench import backends, outcome
from scalebench.cluster import network
from scalebench.data.preprocess import read_manifest
from scalebench.refusal import Refused, SettingRefused
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import binding, provenance, rank_env
from scalebench.train.faults import FaultPlan
from scalebench.train.interfaces import Backend, Device, FrameworkSpec
from scalebench.train.loop import TrainingLoop
from scalebench.train.preflight import check_launch

FRAMEWORK_PACKAGES = {"torch": "scalebench.train.torch", "tensorflow": "scalebench.train.tf"}


def _terminate(signum, frame):  # SLURM sends SIGTERM before killing at the time limit
    raise SystemExit(128 + signum)


def cell_hash(settings: dict, data_dir: str) -> str:
    """A short stable hash of the settings and the exact arrays: a checkpoint is only valid for both."""
    canonical = json.dumps({"settings": settings, "data": read_manifest(data_dir)["sha256"]}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def backend_module(framework: str, backend: str) -> ModuleType:
    """The module of `backend` in `framework`: the dotted path its registry entry names, never a
    name built from the backend's (which would share a namespace with the framework's own files)."""
    return importlib.import_module(backends.module(framework, backend))


def framework_spec(framework: str) -> FrameworkSpec:
    """The framework's spec of builders (train/torch/spec.py, train/tf/spec.py)."""
    return importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.spec").SPEC


def check_settings(run: RunSettings) -> None:
    """Refuse, before anything starts, what the cell's backend cannot do (config validation refuses
    such a cell first; a rank started by hand is refused here)."""
    problem = backends.compression_problem(run.cell.framework, run.cell.backend, run.training.compression)
    if problem:
        raise SettingRefused(f"training.compression: {problem}")
    problem = backends.compile_problem(
        run.cell.framework, run.cell.backend, run.training.compile, run.training.deterministic
    )
    if problem:
        raise SettingRefused(f"training.compile: {problem}")


def build_rank(
    run: RunSettings, process: ProcessFacts, place: rank_env.RankInfo
) -> tuple[FrameworkSpec, Device, Backend]:
    """The framework's spec, this rank's device (before any rank joins: NCCL uses it) and its
    backend, joined to the other ranks (backend_module's create)."""
    spec = framework_spec(run.cell.framework)
    device = spec.build_device(run, process, place)
    create = backend_module(run.cell.framework, run.cell.backend).create
    return spec, device, create(run, place, device.type, process.share_gpu)


def main(argv: list[str] | None = None, end_process: bool = False) -> int:
    """One rank from its command line to its exit code. With `end_process` (train.py) the process
    ends here, without the interpreter's teardown of torch's or TensorFlow's modules: a second or
    more of CPU per rank that writes nothing (docs/benchmarks.md, "A rank's end"), since every
    record is written and closed and the backend shut down by now. Not where the backend's workers
    end together in that teardown (Backend.ends_in_teardown)."""
    code, backend = run_rank(argv)
    if end_process and not (backend is not None and backend.ends_in_teardown):
        end_now(code)
    return code


def end_now(code: int) -> NoReturn:
    """End the process with `code` at once, its output flushed: no exit handler or teardown runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_rank(argv: list[str] | None) -> tuple[int, Backend | None]:
    """The rank's exit code, and its backend where one was built (shut down by now)."""
    started = time.perf_counter()
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, _terminate)
    run = RunSettings.from_json(json.loads(args.settings), args.data, args.out)
    process = ProcessFacts.of_rank(run, os.environ)  # this rank's own, from what its launcher gave it
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not adopt_srun_layout(run):
        return 1, None
    place = rank_env.detect()
    cpu_binding = bind_cores(run, place)
    faults = FaultPlan.of_rank(os.environ)  # the test faults, read here once: nothing below reads them
    return train_cell(run, process, place, faults, cpu_binding, started)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", required=True, help="the cell's settings as JSON (scalebench.config)")
    parser.add_argument("--data", required=True, help="folder with images.npy, masks.npy, manifest.json")
    parser.add_argument("--out", required=True, help="the cell's results folder")
    return parser.parse_args(argv)


def adopt_srun_layout(run: RunSettings) -> bool:
    """A Horovod rank started by horovod_srun.py takes Horovod's variables from srun's; False where
    the two layouts disagree (rank 0 records the failure in run.json), else True."""
    try:
        rank_env.adopt_srun_rank()
    except rank_env.LayoutMismatch as error:
        print(f"rank {os.environ['SLURM_PROCID']}: failed: {error}", file=sys.stderr, flush=True)
        if os.environ["SLURM_PROCID"] == "0":
            provenance.record_failure(Path(run.out_dir) / "run.json", run.cell.to_json(), error)
        return False
    return True


def bind_cores(run: RunSettings, place: rank_env.RankInfo) -> binding.Binding | None:
    """This rank bound to its cores as launch.py asks, before the framework's threads, which inherit
    the binding; how, for run.json. None where the cell's backend does not exist (refused next)."""
    if not backends.exists(run.cell.framework, run.cell.backend):
        return None
    per_process = backends.devices_per_process(run.cell.framework, run.cell.backend, run.cell.gpus)
    return binding.bind(place, per_process, run.gpu_binding)


def train_cell(
    run: RunSettings,
    process: ProcessFacts,
    place: rank_env.RankInfo,
    faults: FaultPlan,
    cpu_binding: binding.Binding | None,
    started: float,
) -> tuple[int, Backend | None]:
    """The cell trained on this rank, from the checks to the loop's end: the exit code, and the backend
    where one was built (shut down by now). An out-of-memory or refused cell ends the process here."""
    backend = None
    try:
        network.check_node()  # cluster.network_interface exists on this rank's node
        check_settings(run)
        check_launch(place.processes, place.processes_source, run.cell.framework, run.cell.backend, run.cell.gpus)
        spec, device, backend = build_rank(run, process, place)
        # MultiWorkerMirrored's coordination service installs a SIGTERM handler of its own that only
        # notes the signal: the rank trained on until its launcher's SIGKILL (torchrun's after 30 s,
        # SLURM's after KillWait) and run.json still said "running". Take SIGTERM back.
        signal.signal(signal.SIGTERM, _terminate)
        config_hash = cell_hash(run.source, run.data_dir)
        loop = TrainingLoop(
            run, spec, device, backend, process, config_hash, started, faults=faults, cpu_binding=cpu_binding
        )
        status = loop.train()
        return (0 if status in ("ok", "diverged") else 1), backend
    except outcome.CellOutOfMemory as error:
        # At once, without shutting the backend down (that would wait for the other ranks):
        # the launcher stops them and launch.py records the cell as oom (scalebench/outcome.py).
        print(f"rank {place.rank}: out of memory: {error}", file=sys.stderr, flush=True)
        end_now(outcome.OOM_EXIT_CODE)
    except Refused as error:
        # No retry would change this (scalebench/refusal.py): the cell ends refused, with the reason, at once.
        rank = backend.rank if backend is not None else place.rank
        print(f"rank {rank}: refused: {error}", file=sys.stderr, flush=True)
        outcome.mark(run.out_dir, rank, f"{type(error).__name__}: {error}", "refused")
        end_now(outcome.REFUSED_EXIT_CODE)
    except BaseException as error:
        rank = backend.rank if backend is not None else place.rank
        print(f"rank {rank}: failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        if not isinstance(error, SystemExit):
            traceback.print_exc()
        if rank == 0:
            provenance.record_failure(Path(run.out_dir) / "run.json", run.cell.to_json(), error)
        return (error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else 1), backend
    finally:
        if backend is not None:
            try:
                backend.shutdown()
            except Exception:  # a broken process group must not hide the real error
                pass
