"""Ranks inside an Apptainer/Singularity image (config key environments.<framework>.image), run
through a stand-in `apptainer` on PATH (tests/fixtures/apptainer: the real one cannot be installed
on this Debian, and nothing here was run against it). The stand-in's image names the Python that
stands for the image's own, so the path a rank takes through the container command is the real
one: the planner's question to the environment, the launcher and its ranks inside the image, --nv."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import PYTHON, REPO, cell_settings, framework_python, launch_cell, read_records, tool_env
from scalebench import config as sb_config
from scalebench import environments

STAND_IN = REPO / "tests" / "fixtures" / "apptainer"


def stand_in_image(folder: Path, python: str) -> str:
    """An "image" the stand-in runs `python3` of as `python`."""
    image = folder / "framework.sif"
    image.write_text(python + "\n")
    return str(image)


def with_stand_in(monkeypatch, log: Path) -> None:
    monkeypatch.setenv("PATH", f"{STAND_IN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("APPTAINER_STAND_IN_LOG", str(log))


def test_the_planner_asks_the_image_and_refuses_one_without_the_framework(tmp_path, monkeypatch):
    with_stand_in(monkeypatch, tmp_path / "calls.jsonl")
    image = environments.resolve("torch", {"image": stand_in_image(tmp_path, framework_python("torch"))})
    holds = environments.probe(image)
    assert holds.framework and not holds.problem, holds
    call = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])
    assert call[:6] == [
        "exec",
        "--nv",
        "--bind",
        str(environments.REPOSITORY),
        str(tmp_path / "framework.sif"),
        "python3",
    ]
    # an image without torch (the pipeline's Python stands for it): refused before any job, naming it
    (tmp_path / "bare").mkdir()
    bare = stand_in_image(tmp_path / "bare", PYTHON)
    config = {"matrix": {"frameworks": ["torch"], "backends": ["native"], "gpus": [1], "seeds": [1]}}
    config["environments"] = {"torch": {"image": bare}}
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    try:
        sb_config.validate(config, schema)
        raise AssertionError("an image without torch was not refused")
    except sb_config.ConfigError as error:
        message = str(error)
    assert (
        f"config key 'matrix.frameworks': the torch cells need torch's environment (python3 in the image {bare}, "
        "config key environments.torch.image), and it has no torch package"
    ) in message


def test_a_cells_launcher_and_ranks_run_inside_the_image(prepared_data, tmp_path):
    """Two DDP ranks of one epoch: torchrun and both ranks start inside the image (one container
    command, with --nv and the checkout bound), and the cell trains to its records."""
    log = tmp_path / "calls.jsonl"
    image = stand_in_image(tmp_path, framework_python("torch"))
    out = tmp_path / "cell"
    env = tool_env(APPTAINER_STAND_IN_LOG=str(log))
    result = launch_cell(
        cell_settings("torch", "native", 2, epochs=1),
        prepared_data,
        out,
        sections={"torch": {"image": image}},
        PATH=f"{STAND_IN}{os.pathsep}{env['PATH']}",
        APPTAINER_STAND_IN_LOG=str(log),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 1, calls  # the launcher entered the image once; its ranks are already inside
    assert calls[0][:6] == ["exec", "--nv", "--bind", str(REPO), image, "python3"]
    assert calls[0][6:9] == ["-m", "torch.distributed.run", "--nnodes=1"]
    assert str(REPO / "workflow" / "scripts" / "train.py") in calls[0]
    epochs, final, run = read_records(out)
    assert run["status"] == "ok" and final["status"] == "ok" and len(epochs) == 1
    assert run["replicas"] == 2
