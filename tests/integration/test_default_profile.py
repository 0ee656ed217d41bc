"""Plain `snakemake` commands get the retries, keep-going, rerun-incomplete and latency wait of
profiles/default, as Snakemake itself reads them (its own argument parsing, in the repository)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, tool_env

PARSE = """
import json, sys
from snakemake.cli import parse_args
_, args = parse_args(sys.argv[1:])
print(json.dumps({k: getattr(args, k) for k in ("retries", "keep_going", "rerun_incomplete", "latency_wait")}))
"""
SAFE = {"retries": 2, "keep_going": True, "rerun_incomplete": True, "latency_wait": 60}


def parsed(*argv: str, cwd=REPO) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PARSE, *argv], cwd=cwd, capture_output=True, text=True, env=tool_env(), timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        ("--executor", "slurm", "-j", "50"),
        ("--report", "report.html"),
        ("--profile", "profiles/local"),
        ("--profile", "profiles/slurm"),
    ],
)
def test_every_run_of_the_workflow_gets_the_safety_settings(argv):
    assert parsed(*argv) == SAFE


def test_a_run_from_another_directory_finds_the_profile_beside_the_snakefile(tmp_path):
    assert parsed("-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), cwd=tmp_path) == SAFE


def test_the_command_line_still_wins():
    assert parsed("--executor", "slurm", "--retries", "0")["retries"] == 0
