"""Shared fixtures: the repository, its Python, small datasets and a Snakemake runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "workflow" / "scripts"
sys.path.insert(0, str(SCRIPTS))

from scalebench import config as sb_config  # noqa: E402
from scalebench import preprocess, synthetic  # noqa: E402

PYTHON = sys.executable
BIN = Path(sys.executable).parent


def tool_env(**extra: str) -> dict[str, str]:
    """The environment for subprocesses: this Python's bin first on PATH (torchrun, horovodrun)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def schema() -> dict:
    return sb_config.load_schema(REPO / "config" / "schema.yaml")


def tiny_config(**sections: dict) -> dict:
    """A small, fast study config; keyword arguments update whole sections."""
    config = {
        "dataset": {"source": "synthetic", "image_size": [32, 48], "synthetic": {"count": 40, "size": [48, 64]}},
        "matrix": {"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2], "seeds": [1]},
        "training": {
            "epochs": 3,
            "batch_per_gpu": 4,
            "threads_per_rank": 1,
            "collective_timeout_s": 30,
            "loader": {"workers": 0},
            "predictions": 2,
        },
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory) -> Path:
    """40 synthetic pairs at 32 x 48, preprocessed like the pipeline does."""
    root = tmp_path_factory.mktemp("data")
    synthetic.write_dataset(root / "raw", 40, 48, 64, seed=0)
    pairs, rule = preprocess.find_pairs(root / "raw")
    preprocess.preprocess(pairs, root / "prepared", (32, 48), 0.2, 42, {"source": "synthetic", "pairing": rule})
    return root / "prepared"


def run_snakemake(workdir: Path, config: dict, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run the real workflow in `workdir` with `config` as its only config file."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "test-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    command = [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config_file),
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=tool_env())


def cell_settings(framework: str, backend: str, gpus: int, seed: int = 1, **training: object) -> dict:
    """Validated settings of one cell of tiny_config(), with training overrides."""
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    config = sb_config.validate(tiny_config(training=dict(training)), schema)
    return sb_config.train_settings(config, sb_config.Cell(framework, backend, gpus, seed))


def launch_cell(settings: dict, data: Path, out: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """Start a cell's ranks exactly as the train rule does (workflow/scripts/launch.py)."""
    import json

    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    launchers = sb_config.validate({}, schema)["launchers"]
    command = [
        PYTHON,
        str(SCRIPTS / "launch.py"),
        "--settings",
        json.dumps(settings),
        "--data",
        str(data),
        "--out",
        str(out),
        "--launchers",
        json.dumps(launchers),
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=tool_env(SCALEBENCH_EXECUTOR="local", **env)
    )


def read_records(out: Path) -> tuple[list[dict], dict, dict]:
    """(epoch records, final record, run.json) of a cell folder."""
    import json

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    epochs = [r for r in lines if r["type"] == "epoch"]
    final = next(r for r in lines if r["type"] == "final")
    return epochs, final, json.loads((out / "run.json").read_text())
