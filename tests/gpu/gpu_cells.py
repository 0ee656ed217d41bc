"""One torch cell on the GPU, started through launch.py exactly as the train rule does (tests/gpu)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cell_settings, launch_cell


def train_on_gpu(
    backend: str, gpus: int, data: Path, out: Path, env: dict | None = None, **training
) -> tuple[dict, list[dict], str]:
    """(run.json, metrics records, log) of a `device: cuda` cell; ({}, [], log) when it failed."""
    settings = cell_settings("torch", backend, gpus, device="cuda", **training)
    result = launch_cell(settings, data, out, timeout=600, **(env or {}))
    log = result.stdout + result.stderr
    if result.returncode:
        return {}, [], log
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return json.loads((out / "run.json").read_text()), records, log
