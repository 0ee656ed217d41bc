"""Cells trained once per test run and read by every test that asks for the same settings.

A cell is named by a hash of its settings, so two tests share a cell only where they would have
trained exactly the same one (same framework, backend, ranks and training section): the tests that
compare two modes (test_data_placement, test_compiled_steps, test_torch_backends' FSDP against DDP)
and the tests that read what any cell of those settings records (test_collectives,
test_observed_steps, test_network_interface, test_torch_training) train it once between them. Each
test still asserts on its own, and alone (`pytest path::name`) it trains the cell itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import cell_settings, copy_study, launch_cell, made_once, run_snakemake, tiny_config

# the collective benchmark of the multi-rank cells that test_collectives reads: a short one, with room
# for FSDP's three operations at the gradient's size
COLLECTIVES = {"budget_s": 1.5, "max_bytes": 2**20, "iterations": 3, "warmup": 1}
# a rate that changes between epochs (test_observed_steps), for every one-rank PyTorch cell here
SCHEDULE = {"epochs": 2, "decay_every": 1, "decay_factor": 0.5}


def placed(framework: str, backend: str, gpus: int, placement: str, **training: object) -> dict:
    """A cell of test_data_placement: two epochs, validation after each, the samples at `placement`
    (with `training`'s other keys: test_compiled_steps' compiled TensorFlow cells)."""
    loader = {"workers": 0, "placement": placement}
    return cell_settings(
        framework, backend, gpus, epochs=2, eval_every=1, loader=loader, collectives=COLLECTIVES, **training
    )


def unmeasured_over_loopback() -> dict:
    """A two-rank DDP cell of one epoch over the loopback interface (cluster.network_interface) with a
    collective benchmark of no budget: test_network_interface reads how it trained, test_collectives
    what a budget of nothing records."""
    training = {"epochs": 1, "checkpoint_every": 0, "predictions": 0, "collectives": {**COLLECTIVES, "budget_s": 0}}
    return {**cell_settings("torch", "native", 2, **training), "network_interface": "lo"}


def trained_once(tmp_path_factory: pytest.TempPathFactory, settings: dict, data: Path, timeout: float = 600) -> Path:
    """The folder of the cell of `settings`, trained on `data` as the train rule runs it, once per run."""
    text = json.dumps({"settings": settings, "data": str(data)}, sort_keys=True)
    cell, digest = settings["cell"], hashlib.sha256(text.encode()).hexdigest()[:12]
    name = f"cell-{cell['framework']}-{cell['backend']}-g{cell['gpus']}-{digest}"

    def make(folder: Path) -> None:
        (folder / "settings.json").write_text(text)
        result = launch_cell(settings, data, folder / "out", timeout=timeout)
        (folder / "output.txt").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, name, make) / "out"


def launch_output(out: Path) -> str:
    """What the launcher and the ranks of the cell trained_once put in `out` printed (stdout, then stderr)."""
    return (out.parent / "output.txt").read_text()


def study_data(tmp_path_factory: pytest.TempPathFactory, workdir: Path, config: dict) -> Path:
    """`config`'s dataset as the workflow prepares it (its dataset jobs, prepared_data), once per run
    for every study of the same dataset section, copied into `workdir`'s results/data with its files'
    dates (copy_study): a study of that dataset there finds it up to date, and only trains and analyses."""
    dataset = {"dataset": config.get("dataset", {})}
    digest = hashlib.sha256(json.dumps(dataset, sort_keys=True).encode()).hexdigest()[:12]

    def make(folder: Path) -> None:
        result = run_snakemake(folder, tiny_config(**dataset), "--cores", "1", "prepared_data")
        assert result.returncode == 0, result.stderr[-3000:]

    made = made_once(tmp_path_factory, f"study-data-{digest}", make)
    return copy_study(made / "results" / "data", workdir / "results" / "data")
