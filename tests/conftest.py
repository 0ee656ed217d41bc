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
