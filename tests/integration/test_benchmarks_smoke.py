"""Every benchmark runs in its smoke mode (`--smoke`: the smallest sizes, one repeat), so a change
that breaks a benchmark fails here, not when someone next measures; and every benchmark command
the docs print beside a figure is accepted as printed (`--parse-only`, benchmarks/_common.py).

A smoke run checks that the benchmark runs to its figures and prints them; at that size they
mean nothing, and no test here reads a time."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, made_once, tool_env
from readme_commands import documents, shell_commands

pytestmark = pytest.mark.integration

BENCHMARKS = REPO / "benchmarks"

# Each benchmark and the lines its smoke run must print (multiline regexes): each is printed only
# once its measurement ran, so a benchmark that silently skipped its work fails.
PRINTS = {
    "analysis_scale.py": [r"^16 cells x 20 epochs \+ legacy: collect .* plots .* total"],
    "bill_error.py": [
        r"^start 1 \(seed 1\): bill: ",
        r"^median error .* over the 1 cells predicted from measured cells",
    ],
    "communication.py": [
        r"^torch_horovod: steady epoch 1 rank .* ratio .* allreduce busy .* tensor allreduces",
        r"^DDP probe rank 0: step",
        r"^DDP probe rank 1: step",
    ],
    "compression.py": [r"^torch_native +\d+\.\d+ +\d+\.\d+ +\d+\.\d+ +\d"],
    "cpu_binding.py": [r"^cores +\d+\.\d+ .* 1 of 1", r"^none +\d+\.\d+ .* 0 of 1"],
    "data_path.py": [r"^torch host: data wait .* loader alone", r"^tensorflow host: data wait .* loader alone"],
    "framework_parity.py": [r"^torch: .* images/s", r"^tensorflow: .* images/s", r"^torch / tensorflow: "],
    # without a GPU (this machine): determinism and collectives on the CPU, the rest named as skipped
    "gpu_check.py": [r"^  deterministic_on +\d", r"one rank: latency floor", r"^    width  4: all-reduce"],
    # torch alone: TensorFlow's bare loop is framework_parity's line above, its harness() data_path's
    "harness_overhead.py": [r"^torch: harness .* ratio"],
    "horovod_launch.py": [
        r"^horovodrun: .* CPU-s",
        r"^horovod_run\.py: .* CPU-s",
        r"^horovod_run\.py saves .* a launch",
    ],
    "hosts_scale.py": [
        r"^24 cells x 3 epochs, .* rank-epochs: ranks.csv .* analyse_hosts .* 2 figures",
        r"^slow nodes found: ",
    ],
    "model_flops.py": [r"^32x48: forward .* FlopCounterMode .* \(ratio \d"],
    "pipeline_scale.py": [
        r"^snakemake -n, 16 cells: median",
        r"^snakemake -n, 16 finished cells x 20 epochs \(no train job planned\)",
        r"^16 cells x 20 epochs: data rules .* snakemake --report",
    ],
    "rank_end.py": [r"^torch: train\.py .* CPU-s, with the teardown .* CPU-s per rank .* the end saves"],
    "step_split_overhead.py": [r"^torch/native +steady epoch on .* on/off .* \(smoke: no verdict\)"],
    "tf_autograph_cost.py": [r"^without AutoGraph \(the project's\) .* CPU-s per rank", r"^AutoGraph would add "],
    "tf_mark_cost.py": [r"^numpy_function \(the project's\) .* per mark", r"^py_function .* per mark"],
}
# the option that keeps a benchmark's files in a folder of the test's (None: it writes none)
WORKDIR_OPTION = {
    "analysis_scale.py": "--out",
    "hosts_scale.py": "--out",
    "horovod_launch.py": None,
    "model_flops.py": None,
    "tf_mark_cost.py": None,
}


def test_every_benchmark_has_a_smoke_run():
    scripts = sorted(path.name for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_"))
    assert scripts == sorted(PRINTS)


@pytest.mark.parametrize("script", sorted(PRINTS))
def test_the_benchmark_runs_in_its_smoke_mode(script, tmp_path):
    command = [sys.executable, str(BENCHMARKS / script), "--smoke"]
    option = WORKDIR_OPTION.get(script, "--workdir")
    if option:
        command += [option, str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=tool_env(), cwd=REPO, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    missing = [line for line in PRINTS[script] if not re.search(line, result.stdout, re.MULTILINE)]
    assert not missing, f"{script} did not print {missing}:\n{output[-4000:]}"
    if script == "pipeline_scale.py":
        assert (tmp_path / "report_16" / "report.html").stat().st_size > 0
    if script == "gpu_check.py" and "no CUDA device" in result.stdout:
        assert "skipped (they need a GPU): precision, tf32, loader, shared, mfu, harness, split, width" in result.stdout


def benchmark_commands() -> list[str]:
    """Every command of the docs' shell blocks that runs a script of benchmarks/."""
    commands = [command for document in documents(REPO) for command in shell_commands(document.read_text())]
    return list(dict.fromkeys(c for c in commands if re.search(r"(^|\s)benchmarks/\w+\.py(\s|$)", c)))


COMMANDS = benchmark_commands()


def test_the_docs_print_the_benchmarks_commands():
    assert len(COMMANDS) >= 15, COMMANDS


# Every command of the docs parsed in one Python process (each script's own code, run as `python
# script` runs it, with the command's arguments and --parse-only, which prints the options and exits
# before any work): a child interpreter per command cost a second of CPU each, and nothing of a
# script's parsing differs in a process that parsed another script's before.
PARSE = """
import contextlib, io, json, runpy, sys
results = {}
for command, argv in json.loads(sys.argv[1]).items():
    sys.argv, errors, code = argv, io.StringIO(), "ended without exiting"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exited:
            code = exited.code
        except Exception as error:
            code = f"{type(error).__name__}: {error}"
    results[command] = {"code": code, "stderr": errors.getvalue()[-2000:]}
print(json.dumps(results))
"""


def parse_arguments(command: str) -> list[str]:
    """sys.argv of the command's script, as the docs print it, with --parse-only."""
    words = shlex.split(command)
    at = next(i for i, word in enumerate(words) if re.fullmatch(r"benchmarks/\w+\.py", word))
    assert Path(words[0]).name.startswith("python"), command
    return [str(REPO / words[at]), *words[at + 1 :], "--parse-only"]


@pytest.fixture
def parsed(tmp_path_factory) -> dict[str, dict]:
    """Each command of the docs: the exit code its script's parsing ended with, and what it printed on
    stderr; parsed once per run for every command's test."""

    def make(folder: Path) -> None:
        commands = json.dumps({command: parse_arguments(command) for command in COMMANDS})
        result = subprocess.run(
            [sys.executable, "-c", PARSE, commands],
            capture_output=True,
            text=True,
            env=tool_env(),
            cwd=REPO,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        (folder / "parsed.json").write_text(result.stdout.strip().splitlines()[-1])

    return json.loads((made_once(tmp_path_factory, "benchmark-commands-parsed", make) / "parsed.json").read_text())


@pytest.mark.parametrize("command", COMMANDS)
def test_a_benchmark_command_of_the_docs_is_accepted_as_printed(command, parsed):
    assert parsed[command]["code"] == 0, parsed[command]["stderr"]
