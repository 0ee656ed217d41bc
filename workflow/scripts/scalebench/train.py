"""Entry point of one rank: parse arguments, pick the framework and backend, train.

    python workflow/scripts/train.py --settings JSON --data DIR --out DIR

The launcher (torchrun, srun or horovodrun; see launch.py) starts one of these
per rank. Every rank runs the same code; rank 0 writes the records.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from . import records
from .config import config_hash

# (framework, backend) -> (shared training module, backend module)
MODULES = {
    ("torch", "native"): ("torch_training", "torch_ddp"),
    ("torch", "horovod"): ("torch_training", "torch_horovod"),
    ("tensorflow", "native"): ("tf_training", "tf_native"),
    ("tensorflow", "horovod"): ("tf_training", "tf_horovod"),
}


def _terminate(signum, frame):  # SLURM sends SIGTERM before killing at the time limit
    raise SystemExit(128 + signum)


def cell_hash(settings: dict, data_dir: str) -> str:
    """Hash of the settings and the exact arrays: a checkpoint is only valid for both."""
    with open(Path(data_dir) / "manifest.json") as handle:
        data_sha = json.load(handle)["sha256"]
    return config_hash({"settings": settings, "data": data_sha})


def main(argv: list[str] | None = None) -> int:
    clock = records.Clock()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", required=True, help="the cell's settings as JSON (rules/common.smk)")
    parser.add_argument("--data", required=True, help="folder with images.npy, masks.npy, manifest.json")
    parser.add_argument("--out", required=True, help="the cell's results folder")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    settings = json.loads(args.settings)
    cell = settings["cell"]
    key = (cell["framework"], cell["backend"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    training_name, backend_name = MODULES[key]
    try:
        training_module = importlib.import_module(f".{training_name}", __package__)
        backend_module = importlib.import_module(f".{backend_name}", __package__)
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith(f"{__package__}."):
            print(
                f"error: {cell['framework']}/{cell['backend']} is not implemented yet ({error.name})", file=sys.stderr
            )
            return 2
        raise
    backend = None
    try:
        backend = backend_module.create(settings["training"])
        status = training_module.run(backend, settings, args.data, args.out, cell_hash(settings, args.data), clock)
        return 0 if status in ("ok", "diverged", "oom") else 1
    except BaseException as error:
        rank = getattr(backend, "rank", int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0))))
        print(f"rank {rank}: failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        if not isinstance(error, SystemExit):
            traceback.print_exc()
        if rank == 0:
            run_json = Path(args.out) / "run.json"
            state = json.loads(run_json.read_text()) if run_json.exists() else {**cell}
            state.update(status="failed", error=f"{type(error).__name__}: {error}", end=records.now_iso())
            records.write_json_atomic(run_json, state)
        return error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else 1
    finally:
        if backend is not None:
            try:
                backend.shutdown()
            except Exception:  # a broken process group must not hide the real error
                pass
