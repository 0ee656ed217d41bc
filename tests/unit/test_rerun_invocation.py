"""The report's rerun commands reproduce the study's Snakemake invocation."""

from __future__ import annotations

import shlex
from pathlib import Path

from scalebench import rerun

SNAKEFILE = "/repo/Snakefile"


def invocation(argv: list[str], workdir: str = "/work/study", configfiles: list[str] = ()) -> rerun.Invocation:
    return rerun.from_argv(["/nowhere/bin/snakemake", *argv], workdir, list(configfiles), SNAKEFILE)


def test_config_files_in_order_overrides_and_executor_are_kept_targets_and_one_shots_dropped():
    argv = [
        "--configfile",
        "study.yaml",
        "more.yaml",
        "--config",
        'training={"epochs": 3}',
        "partial=true",
        "seeds=[1, 2]",
        "--executor",
        "slurm",
        "-j50",
        "-n",
        "--report",
        "report.html",
        "results/runs/torch/native/g1/s1/metrics.jsonl",
    ]
    found = invocation(argv, configfiles=["/work/study/study.yaml", "/work/study/more.yaml"])
    assert found.options == (
        "--configfile",
        "/work/study/study.yaml",
        "/work/study/more.yaml",
        "--config",
        'training={"epochs": 3}',
        "seeds=[1, 2]",
        "--executor",
        "slurm",
        "-j",
        "50",
    )
    assert found.directory == "/work/study"


def test_the_command_is_quoted_for_the_shell_and_cds_to_the_work_directory():
    found = invocation(["--config", "dataset={folder: '/my data/sem'}", "--cores", "2"], workdir="/work/my study")
    command = found.command(["results/runs/torch/native/g2/s1/metrics.jsonl"], force=True)
    cd, words = command.split(" && ", 1)
    assert shlex.split(cd) == ["cd", "/work/my study"]
    assert shlex.split(words)[-7:] == [
        "--config",
        "dataset={folder: '/my data/sem'}",
        "--cores",
        "2",
        "--force",
        "--",
        "results/runs/torch/native/g2/s1/metrics.jsonl",
    ]


def test_paths_are_absolute_so_the_command_runs_from_anywhere(tmp_path):
    (tmp_path / "profiles" / "slurm").mkdir(parents=True)
    argv = ["-s", "Snakefile", "--directory", "../elsewhere", "--profile", "profiles/slurm", "--configfile", "c.yaml"]
    found = rerun.from_argv(
        ["snakemake", *argv], str(tmp_path), [str(tmp_path / "c.yaml")], str(tmp_path / "Snakefile")
    )
    options = dict(zip(found.options[::2], found.options[1::2], strict=True))
    assert options == {
        "-s": str(tmp_path / "Snakefile"),
        "--directory": str(tmp_path),
        "--profile": str(tmp_path / "profiles" / "slurm"),
        "--configfile": str(tmp_path / "c.yaml"),
    }


def test_a_repeated_option_counts_once_as_snakemake_reads_it():
    found = invocation(["--cores", "1", "--cores", "2", "--config", "a=1", "--config", "b=2"])
    assert found.options == ("--cores", "2", "--config", "b=2")


def test_only_partial_in_config_leaves_no_config_option():
    assert invocation(["--config", "partial=true", "--cores", "2"]).options == ("--cores", "2")


def test_the_program_is_the_one_that_ran(tmp_path, monkeypatch):
    other = tmp_path / "bin" / "snakemake"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin")
    assert rerun.from_argv([str(other)], "/w", [], SNAKEFILE).program == (str(other),)
    monkeypatch.setenv("PATH", str(other.parent))
    assert rerun.from_argv([str(other)], "/w", [], SNAKEFILE).program == ("snakemake",)
    main = str(Path(rerun.__file__).parent / "__main__.py")
    assert rerun.from_argv([main], "/w", [], SNAKEFILE).program[1:] == ("-m", "snakemake")


def test_one_more_config_entry_joins_the_study_s_own_so_snakemake_reads_both():
    from snakemake.cli import get_argument_parser, parse_config

    exclude = 'cluster={"exclude": ["n3"]}'
    with_own = invocation(["--config", 'cluster={"partition": "gpu"}', "seeds=[1]", "--cores", "2"])
    without = invocation(["--cores", "2"])
    for found, expected in (
        (with_own, {"cluster": {"partition": "gpu", "exclude": ["n3"]}, "seeds": ["1"]}),
        (without, {"cluster": {"exclude": ["n3"]}}),
    ):
        words = shlex.split(found.with_config(exclude).command(["t.jsonl"], force=True).split(" && ", 1)[1])
        args = get_argument_parser().parse_args(words[1:])
        assert parse_config(args.config) == expected and args.targets == ["t.jsonl"] and args.cores == 2


def test_the_command_line_is_read_once_for_the_planner(tmp_path, monkeypatch):
    """What planning reads of this start (config/planning.py): the executor, what is forced, the
    targets (a cell outside the matrix is planned by them), the rerun triggers, profiles included, and
    whether it is a dry run (which keeps no prediction as a cell's: config/bill.py)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles" / "default").mkdir(parents=True)
    (tmp_path / "profiles" / "default" / "config.yaml").write_text("rerun-triggers: mtime\n")
    (tmp_path / "Snakefile").write_text("")
    target = "results/runs/torch/native/g8/s2/metrics.jsonl"
    found = rerun.command(["snakemake", "--executor", "slurm", "-n", "--force", "--", target])
    assert found == rerun.Command("slurm", (False, frozenset({target})), (target,), frozenset({"mtime"}), True)
    asked = rerun.command(["snakemake", "-n", "--rerun-triggers", "mtime", "params", "software-env"])
    assert (asked.executor, asked.targets, asked.rerun_triggers) == ("local", (), {"mtime", "params", "software-env"})
    assert not rerun.command(["snakemake", "--cores", "2"]).dry_run
    assert rerun.command(["python", "-m", "pytest"]) is None  # not Snakemake's command line: the API
