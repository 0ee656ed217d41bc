"""Every benchmark runs in its smoke mode (`--smoke`: the smallest sizes, one repeat), so a change
that breaks a benchmark fails here, not when someone next measures; and every benchmark command
the docs print beside a figure is accepted as printed (`--parse-only`, benchmarks/_common.py).

A smoke run checks that the benchmark runs to its figures and prints them; at that size they
mean nothing, and no test here reads a time. Each benchmark runs with the Python of its environment
(PYTHONS: a framework's where it imports that framework in its own process, else the pipeline's,
whose benchmarks start their framework work in the framework's environment), and the docs print
that Python in its command. This module runs in the pipeline's session: it imports no framework."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, framework_python, made_once, tool_env
from readme_commands import documents, shell_commands
from scalebench import environments

pytestmark = pytest.mark.integration

BENCHMARKS = REPO / "benchmarks"

# The Python each benchmark runs with (its _common.runs_with), and the frameworks whose environments
# its smoke run starts children or ranks in
PYTHONS = {
    "analysis_scale.py": ("pipeline", ()),
    "bill_error.py": ("pipeline", ("torch",)),
    "change_points.py": ("pipeline", ()),
    "communication.py": ("pipeline", ("torch",)),
    "compression.py": ("pipeline", ("torch",)),
    "cpu_binding.py": ("pipeline", ("torch",)),
    "data_path.py": ("pipeline", ("torch", "tensorflow")),
    "framework_parity.py": ("pipeline", ("torch", "tensorflow")),
    "gpu_check.py": ("pipeline", ("torch",)),
    "harness_overhead.py": ("pipeline", ("torch",)),
    "horovod_launch.py": ("pipeline", ("tensorflow",)),
    "hosts_scale.py": ("pipeline", ()),
    "model_flops.py": ("torch", ()),
    "pipeline_scale.py": ("pipeline", ()),
    "rank_end.py": ("pipeline", ("torch",)),
    "step_split_overhead.py": ("pipeline", ("torch",)),
    "tf_autograph_cost.py": ("pipeline", ("tensorflow",)),
    "tf_mark_cost.py": ("tensorflow", ()),
}
# each environment's Python as the docs print it (commands run from the repository's root)
PRINTED = {
    "pipeline": ".venv/bin/python",
    "torch": ".venv/frameworks/torch/bin/python",
    "tensorflow": ".venv/frameworks/tensorflow/bin/python",
}


def python(environment: str) -> str:
    """This install's Python of `environment` (the pipeline's whichever session runs this)."""
    return PYTHON if environment == "pipeline" else framework_python(environment)


def skip_unless_installed(frameworks: list[str] | tuple[str, ...], why: str) -> None:
    missing = sorted({f for f in frameworks if f != "pipeline" and not Path(python(f)).exists()})
    if missing:
        pytest.skip(f"{why} needs {' and '.join(missing)}'s environment: {environments.install_command(missing)}")


# Each benchmark and the lines its smoke run must print (multiline regexes): each is printed only
# once its measurement ran, so a benchmark that silently skipped its work fails.
PRINTS = {
    "analysis_scale.py": [r"^16 cells x 20 epochs \+ legacy: collect .* plots .* total"],
    "bill_error.py": [
        r"^start 1 \(seed 1\): bill: ",
        r"^median error .* over the 1 cells predicted from measured cells",
    ],
    "change_points.py": [
        r"^noise only, 12 studies, 2% noise: a change in \d+ of 40 series",
        r"^a 10% drop from study 8 of 12, 2% noise: found there alone in \d+ of 20",
        r"^search: .* ms per noise-only series",
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
    "change_points.py": None,
    "hosts_scale.py": "--out",
    "horovod_launch.py": None,
    "model_flops.py": None,
    "tf_mark_cost.py": None,
}


def test_every_benchmark_has_a_smoke_run_and_a_python():
    scripts = sorted(path.name for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_"))
    assert scripts == sorted(PRINTS) == sorted(PYTHONS)


@pytest.mark.parametrize(
    ("script", "environment"),
    [("model_flops.py", "pipeline"), ("bill_error.py", "torch"), ("tf_mark_cost.py", "torch")],
)
def test_a_benchmark_run_with_another_python_names_its_own(script, environment):
    """At once, before any import it lacks: a sentence with the command, not a traceback."""
    skip_unless_installed([environment], script)
    command = [python(environment), f"benchmarks/{script}", "--parse-only"]
    result = subprocess.run(command, capture_output=True, text=True, env=tool_env(), cwd=REPO, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    wanted = PYTHONS[script][0]
    assert f"runs with {'the pipeline' if wanted == 'pipeline' else wanted}'s Python" in result.stderr
    shown = os.path.relpath(python(wanted), REPO)  # as _common.shown prints it, run from the repository
    shown = python(wanted) if shown.startswith("..") else shown
    assert result.stderr.strip().splitlines()[-1].strip() == f"{shown} benchmarks/{script} --parse-only"


@pytest.mark.parametrize("script", sorted(PRINTS))
def test_the_benchmark_runs_in_its_smoke_mode(script, tmp_path):
    environment, frameworks = PYTHONS[script]
    skip_unless_installed([environment, *frameworks], f"{script}'s smoke run")
    command = [python(environment), str(BENCHMARKS / script), "--smoke"]
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


def script_at(words: list[str]) -> int:
    return next(i for i, word in enumerate(words) if re.fullmatch(r"benchmarks/\w+\.py", word))


def parse_arguments(command: str) -> list[str]:
    """sys.argv of the command's script, as the docs print it, with --parse-only."""
    words = shlex.split(command)
    at = script_at(words)
    return [str(REPO / words[at]), *words[at + 1 :], "--parse-only"]


def printed_environment(command: str) -> str | None:
    """The environment whose Python the command runs its script with, None where it names none of them."""
    words = shlex.split(command)
    return next((name for name, printed in PRINTED.items() if words[: script_at(words)] == [printed]), None)


@pytest.fixture
def parsed(tmp_path_factory) -> dict[str, dict]:
    """Each command of the docs: the exit code its script's parsing ended with, and what it printed on
    stderr, parsed by the Python the command prints (one process per environment); parsed once per
    run for every command's test. A command of an environment not installed here is missing."""

    def make(folder: Path) -> None:
        results = {}
        for environment in PRINTED:
            mine = [command for command in COMMANDS if printed_environment(command) == environment]
            if not mine or not Path(python(environment)).exists():
                continue
            commands = json.dumps({command: parse_arguments(command) for command in mine})
            result = subprocess.run(
                [python(environment), "-c", PARSE, commands],
                capture_output=True,
                text=True,
                env=tool_env(),
                cwd=REPO,
                timeout=300,
            )
            assert result.returncode == 0, result.stderr[-3000:]
            results.update(json.loads(result.stdout.strip().splitlines()[-1]))
        (folder / "parsed.json").write_text(json.dumps(results))

    return json.loads((made_once(tmp_path_factory, "benchmark-commands-parsed", make) / "parsed.json").read_text())


@pytest.mark.parametrize("command", COMMANDS)
def test_a_benchmark_command_of_the_docs_is_accepted_as_printed(command, parsed):
    """With the Python its script runs with (PYTHONS), as the docs print it."""
    script = Path(shlex.split(command)[script_at(shlex.split(command))]).name
    wanted = PYTHONS[script][0]
    assert printed_environment(command) == wanted, f"{command}: {script} runs with {PRINTED[wanted]}"
    skip_unless_installed([wanted], command)
    assert parsed[command]["code"] == 0, parsed[command]["stderr"]
