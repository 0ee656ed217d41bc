#!/usr/bin/env python3
"""Planted faults that the test suite must catch, to show that making the suite cheaper kept its power.

Each mutant is one textual change to the product code, a fault that once was or easily could be
made: it is planted into a temporary copy of a tree (a git repository of its own, so run.json's
commit can be read there), and the tests that should catch it run in that copy. A mutant is caught
when a test fails, missed when every test passes; a mutant that cannot be planted (no site's file holds
its text exactly once, the planted file does not parse, a test it names is gone) is an error, never a
miss. Where the code has moved, a mutant lists each place the same fault is planted, newest first, so
that one mutant runs against the tree before a change and after it; tests/unit/test_mutants.py
checks that every mutant plants in this checkout, so a refactor that moves the code updates it here.

    .venv/bin/python tools/mutants.py                          # every mutant, against this checkout
    .venv/bin/python tools/mutants.py --tree ../main autocast  # one, against another checkout
    .venv/bin/python tools/mutants.py --list                   # the mutants and their tests
    .venv/bin/python tools/mutants.py --all                    # every failing test, not only the first
    .venv/bin/python tools/mutants.py --plant-only --tree DIR  # does each plant in DIR? (no test runs)

--clean first runs the tests unmutated (they must pass, or a failure says nothing about the mutant).
A mutant's tests run as run_tests.sh runs them: one pytest session per environment the copy's .venv
holds (the pipeline's, then each framework's), each collecting the test modules of its own
environment (tests/conftest.py).
Results and the command are recorded in docs/benchmarks.md ("The test suite's power").
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "workflow/scripts/scalebench"


class Site(NamedTuple):
    path: str  # the file it changes, relative to the tree
    old: str  # the text it replaces, which the file must hold exactly once
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    fault: str  # what the planted change does, in words
    sites: tuple[Site, ...]  # where the fault can be planted: the first site whose file holds its text once
    tests: tuple[str, ...]  # pytest's arguments: the tests that must catch it


# A mutant's sites are one fault where the code has moved: the trainer's builder modules (train/torch/
# steps.py, train/tf/model.py) first, then the facades they replaced (train/torch/framework.py,
# train/tf/framework.py), so that the table before and after the suite's change plants the same fault.
TORCH_STEPS, TORCH_FACADE = f"{PACKAGE}/train/torch/steps.py", f"{PACKAGE}/train/torch/framework.py"
AUTOCAST = (
    "with torch.autocast(self.device.type, dtype=self.autocast, enabled={}):\n            logits = self.{}(images)"
)
OBSERVED_DTYPE = 'dtype = str(self.output_dtype).removeprefix("torch.") if self.output_dtype is not None else None'
IOU, IOU_ON_LOGITS = "predicted, truth = logits > 0, masks > 0.5", "predicted, truth = logits > 0.5, masks > 0.5"

MUTANTS = (
    Mutant(
        "data-wait",
        "the loop's wait for a batch is never counted in data_wait_s",
        (
            Site(
                f"{PACKAGE}/train/loop.py",
                "wait += time.perf_counter() - waited",
                "wait += 0.0 * (time.perf_counter() - waited)",
            ),
        ),
        ("tests/integration/test_step_split.py", "tests/integration/test_data_placement.py", "tests/unit/train"),
    ),
    Mutant(
        "autocast",
        "PyTorch's training step runs without autocast whatever training.precision asks",
        (
            Site(
                TORCH_STEPS,
                AUTOCAST.format("self.autocast is not None", "distributed.network"),
                AUTOCAST.format("False", "distributed.network"),
            ),
            Site(
                TORCH_FACADE, AUTOCAST.format("self.autocast is not None", "model"), AUTOCAST.format("False", "model")
            ),
        ),
        ("tests/integration/test_torch_training.py", "tests/integration/test_observed_steps.py", "tests/unit/train"),
    ),
    Mutant(
        "keras-policy",
        "TensorFlow's Keras mixed-precision policy is never set",
        (
            Site(f"{PACKAGE}/train/tf/model.py", "keras.mixed_precision.set_global_policy(numerics.policy)", "pass"),
            Site(f"{PACKAGE}/train/tf/framework.py", "keras.mixed_precision.set_global_policy(self.policy)", "pass"),
        ),
        ("tests/integration/test_tf_training.py", "tests/integration/test_observed_steps.py", "tests/unit/train"),
    ),
    Mutant(
        "iou-on-logits",
        "PyTorch's IOU thresholds the logits at 0.5 (a probability's threshold) instead of 0",
        (Site(TORCH_STEPS, IOU, IOU_ON_LOGITS), Site(TORCH_FACADE, IOU, IOU_ON_LOGITS)),
        (
            "tests/integration/test_torch_training.py",
            "tests/integration/test_torch_backends.py",
            "tests/integration/test_steps_per_epoch.py",
            "tests/unit/train",
        ),
    ),
    Mutant(
        "efficiency-base",
        "parallel efficiency divides the speedup by the GPU count, not by the count over the base's",
        (
            Site(
                f"{PACKAGE}/analysis/scaling.py",
                'row[f"efficiency_{name}{suffix}"] = value * base_gpus / gpus',
                'row[f"efficiency_{name}{suffix}"] = value / gpus',
            ),
        ),
        ("tests/unit/analysis", "tests/unit/report"),
    ),
    Mutant(
        "t-dof",
        "the scaling t-interval takes n degrees of freedom instead of n - 1",
        (
            Site(
                f"{PACKAGE}/analysis/scaling.py",
                "t_quantile(0.5 + LEVEL / 2, len(values) - 1)",
                "t_quantile(0.5 + LEVEL / 2, len(values))",
            ),
            Site(
                f"{PACKAGE}/analysis/scaling.py",
                "stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1)",
                "stats.t.ppf(0.5 + LEVEL / 2, len(values))",
            ),
        ),
        ("tests/unit/analysis", "tests/unit/report"),
    ),
    Mutant(
        "dtype-from-setting",
        "PyTorch's observed compute dtype is copied from training.precision instead of read from the step",
        (
            Site(TORCH_STEPS, OBSERVED_DTYPE, 'dtype = self.run.training.autocast_dtype or "float32"'),
            Site(TORCH_FACADE, OBSERVED_DTYPE, 'dtype = self.training.autocast_dtype or "float32"'),
        ),
        ("tests/integration/test_observed_steps.py", "tests/integration/test_torch_training.py", "tests/unit/train"),
    ),
    Mutant(
        "renamed-field",
        "the epoch record's writer names peak_mem_mb peak_memory_mb (its definition and readers do not)",
        (Site(f"{PACKAGE}/train/metrics.py", '"peak_mem_mb": peak_mem_mb,', '"peak_memory_mb": peak_mem_mb,'),),
        ("tests/unit/train", "tests/unit/test_records.py", "tests/integration/test_torch_training.py"),
    ),
)
# Each mutant's tests: the files that should catch it, those expected to catch it first (the run
# stops at the first failing test; xdist starts the files in this order).


def copy_tree(tree: Path, into: Path) -> Path:
    """The files git sees in `tree` (tracked and untracked, not ignored), copied into a new git
    repository with one commit; its .venv is a link to the tree's, or to this checkout's where the
    tree has none."""
    listed = subprocess.run(
        ["git", "-C", str(tree), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = tree / name
        if source.is_file() and not (tree / name).is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    # a checkout of an old commit (git worktree add) has no environment of its own: this one's serves
    venv = tree / ".venv" if (tree / ".venv").exists() else REPO / ".venv"
    (into / ".venv").symlink_to(venv.resolve())
    git = ["git", "-C", str(into), "-c", "user.name=mutants", "-c", "user.email=mutants@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the tree before a mutant"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return into


def planting(tree: Path, mutant: Mutant) -> tuple[str, str]:
    """(the file, its text with the fault) at the mutant's first site whose file in `tree` holds its
    text exactly once; a LookupError where none does (update the mutant when the code moves)."""
    counts = []
    for site in mutant.sites:
        path = tree / site.path
        text = path.read_text() if path.is_file() else ""
        found = text.count(site.old)
        if found == 1:
            return site.path, text.replace(site.old, site.new)
        counts.append(f"{site.path} holds it {found} times" if path.is_file() else f"no {site.path}")
    raise LookupError(f"no site of mutant {mutant.name} holds its text exactly once: {'; '.join(counts)}")


def plant(copy: Path, mutant: Mutant) -> str:
    """Plants the mutant into `copy`; the file it changed."""
    path, text = planting(copy, mutant)
    (copy / path).write_text(text)
    return path


def missing_tests(tree: Path, mutant: Mutant) -> list[str]:
    return [t for t in mutant.tests if not (tree / t.split("::")[0]).exists()]


def problems(tree: Path, mutants: tuple[Mutant, ...] = MUTANTS) -> list[str]:
    """Why a mutant could not run against `tree`, without running a test: its text is not there
    once, the planted file no longer parses (a fault any test would catch for the wrong reason), or
    a test it names is gone. Empty where every mutant plants."""
    found = []
    for mutant in mutants:
        try:
            path, text = planting(tree, mutant)
        except LookupError as error:
            found.append(str(error))
        else:
            try:
                ast.parse(text, path)
            except SyntaxError as error:
                found.append(f"mutant {mutant.name} leaves {path} unparsable: {error}")
        found += [f"mutant {mutant.name} names a test that {tree.name} lacks: {t}" for t in missing_tests(tree, mutant)]
    return found


FRAMEWORKS = ("torch", "tensorflow")  # the environments beside the pipeline's (.venv/frameworks/<framework>)


def module_environment(path: Path) -> str:
    """The environment a test module declares (`ENVIRONMENT = "torch"` at its top level, as
    tests/conftest.py reads it), else pipeline."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ENVIRONMENT" for t in node.targets):
            return getattr(node.value, "value", "pipeline")
    return "pipeline"


def sessions(copy: Path) -> list[tuple[str, str, dict[str, str]]]:
    """(environment, Python, environment variables) of each pytest session run_tests.sh runs in
    `copy`: the pipeline's, then each installed framework's with the pipeline's packages after its
    own (tests/layer); one session in a tree from before one environment per framework (no tests/layer)."""
    venv, layer = copy / ".venv", copy / "tests" / "layer"
    pipeline = str(venv / "bin" / "python")
    outside = {k: v for k, v in os.environ.items() if k not in ("SCALEBENCH_TEST_ENVIRONMENT", "SCALEBENCH_TEST_LAYER")}
    if not layer.is_dir():
        return [("pipeline", pipeline, outside)]
    found = [("pipeline", pipeline, dict(outside, SCALEBENCH_TEST_ENVIRONMENT="pipeline"))]
    listed = [pipeline, "-c", "import os, site; print(os.pathsep.join(site.getsitepackages()))"]
    site_packages = subprocess.run(listed, capture_output=True, text=True, check=True).stdout.strip()
    for framework in FRAMEWORKS:
        python = venv / "frameworks" / framework / "bin" / "python"
        if python.exists():
            env = dict(outside, SCALEBENCH_TEST_ENVIRONMENT=framework, SCALEBENCH_TEST_LAYER=site_packages)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(layer), os.environ.get("PYTHONPATH")]))
            found.append((framework, str(python), env))
    return found


def session_tests(copy: Path, tests: tuple[str, ...], environment: str, one: bool) -> list[str]:
    """The tests an environment's session is given: every folder (its session collects its own
    modules in it), and the modules named alone that declare this environment (every one where
    `one`: the tree has one session)."""
    chosen = []
    for test in tests:
        path = copy / test.split("::")[0]
        if one or path.is_dir() or module_environment(path) == environment:
            chosen.append(test)
    return chosen


def run_tests(copy: Path, tests: tuple[str, ...], workers: int, every: bool) -> tuple[int, list[str], float]:
    """(pytest's exit code, the failing tests, seconds) of `tests` in `copy`, over every environment's
    session: the first failing session's code, else 0, or 5 where no session collected a test."""
    options = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "-n", str(workers)]
    options += [f"--basetemp={copy.parent / 'basetemp'}"] + ([] if every else ["--maxfail=1"])
    started, codes, failed = time.monotonic(), [], []
    every_session = sessions(copy)
    for environment, python, env in every_session:
        mine = session_tests(copy, tests, environment, len(every_session) == 1)
        if not mine:
            continue
        result = subprocess.run([python, *options, *mine], cwd=copy, capture_output=True, text=True, env=env)
        codes.append(result.returncode)
        failed += re.findall(r"^(?:FAILED|ERROR) (\S+)", result.stdout, re.MULTILINE)
        if failed and not every:  # caught: --maxfail's stop, over the sessions too
            break
    collected = [code for code in codes if code != 5]  # 5: this session collected none of the tests
    code = next((code for code in collected if code != 0), 0 if collected else 5)
    return code, failed, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutants to plant (default: all)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to copy (default: this one)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2)")
    parser.add_argument("--all", action="store_true", help="run every test and list each that fails")
    parser.add_argument("--clean", action="store_true", help="first run each mutant's tests unmutated")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument(
        "--plant-only", action="store_true", help="check that each mutant plants in the tree, and run no test"
    )
    args = parser.parse_args()
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants {sorted(unknown)}; --list lists them")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.list:
        for mutant in chosen:
            sites = "\n  or ".join(site.path for site in mutant.sites)
            print(f"{mutant.name}: {mutant.fault}\n  {sites}\n  tests: {' '.join(mutant.tests)}")
        return 0
    tree = args.tree.resolve()
    if args.plant_only:
        for mutant in chosen:
            found = problems(tree, (mutant,))
            print(f"{mutant.name}: " + ("; ".join(found) if found else f"plants in {planting(tree, mutant)[0]}"))
        return 1 if problems(tree, tuple(chosen)) else 0
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"tree {tree} at {commit.stdout.strip()}")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as scratch:
        copy = copy_tree(tree, Path(scratch) / "tree")
        if args.clean:
            tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            code, failed, seconds = run_tests(copy, tests, args.workers, every=True)
            print(f"unmutated: exit {code} in {seconds:.0f} s", *failed, sep="\n  ", flush=True)
            if code != 0:
                print("the tests fail without a mutant: fix that first", file=sys.stderr)
                return 1
        for mutant in chosen:
            found = problems(copy, (mutant,))
            if found:
                outcomes.append((mutant.name, "error", "; ".join(found)))
                print(f"{mutant.name}: error: {'; '.join(found)}", flush=True)
                continue
            path = plant(copy, mutant)
            try:
                code, failed, seconds = run_tests(copy, mutant.tests, args.workers, args.all)
            finally:
                subprocess.run(["git", "-C", str(copy), "checkout", "-q", "--", path], check=True)
            # --maxfail ends the run as interrupted (exit 2) once a test failed: caught all the same
            verdict = (
                "caught" if failed and code in (1, 2) else "missed" if code == 0 else f"error (pytest exit {code})"
            )
            detail = f"{len(failed)} failing: " + ", ".join(failed) if failed else ""
            outcomes.append((mutant.name, verdict, detail))
            print(f"{mutant.name}: {verdict} in {seconds:.0f} s {detail}", flush=True)
    print("\n| mutant | fault | outcome |\n| --- | --- | --- |")
    faults = {m.name: m.fault for m in MUTANTS}
    for name, verdict, detail in outcomes:
        print(f"| {name} | {faults[name]} | {verdict}{': ' + detail if detail else ''} |")
    return 0 if all(verdict == "caught" for _, verdict, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
