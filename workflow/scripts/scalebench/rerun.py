"""The study's own Snakemake invocation, so the report's rerun commands rebuild cells as they were made.

A rerun command must carry everything that shaped the study: the config files in
order, every --config override, the Snakefile and work directory, the executor or
profile and the executor's own options. Dropping any of them rebuilds the cell with
other settings. So the command is the invocation that built the report, read with
Snakemake's own argument parser, minus its targets and one-shot options (dry run,
--report, --force...) and minus `partial`, which shapes only the report; paths are
made absolute so the command runs as printed from the work directory it names.
The targets follow `--`: options such as --configfile, --config, --set-resources,
--default-resources and --set-threads take every word up to the next option, so
a target right after them would be read as one more of their values.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

# Options that say what this one call does rather than how the study is built.
ONE_SHOT = {
    "archive",
    "batch",
    "cleanup_metadata",
    "cleanup_shadow",
    "conda_cleanup_envs",
    "conda_cleanup_pkgs",
    "containerize",
    "d3dag",
    "dag",
    "debug_dag",
    "delete_all_output",
    "delete_temp_output",
    "detailed_summary",
    "draft_notebook",
    "dryrun",
    "edit_notebook",
    "export_cwl",
    "filegraph",
    "force",
    "forceall",
    "forcerun",
    "generate_unit_tests",
    "help",
    "lint",
    "list_changes",
    "list_conda_envs",
    "list_input_changes",
    "list_params_changes",
    "list_rules",
    "list_target_rules",
    "list_untracked",
    "mode",
    "notebook_listen",
    "omit_from",
    "print_compilation",
    "report",
    "report_after_run",
    "report_html_path",
    "report_html_stylesheet_path",
    "report_metadata",
    "report_stylesheet",
    "reporter",
    "rulegraph",
    "summary",
    "target_jobs",
    "touch",
    "unlock",
    "until",
    "version",
}
REPORT_ONLY_CONFIG = ("partial",)  # --config keys that change the report, not a cell
PATH_OPTIONS = ("directory", "profile", "workflow_profile")


@dataclass(frozen=True)
class Invocation:
    """How the study was started: the program, where, and the options that shape it."""

    program: tuple[str, ...]
    directory: str
    options: tuple[str, ...]

    def command(self, targets: list[str], force: bool = False) -> str:
        """The shell line that builds `targets` (forced: rerun their own jobs) as the study would."""
        # `--` ends the options: the last one may take several values (--configfile a.yaml b.yaml)
        words = [*self.program, *self.options, *(["--force"] if force else []), *(["--", *targets] if targets else [])]
        return f"cd {shlex.quote(self.directory)} && {shlex.join(words)}"

    def with_config(self, entry: str) -> Invocation:
        """The same invocation with one more --config entry (KEY=VALUE) after the study's own: argparse
        keeps only the last --config option, so the entry joins it rather than following as another;
        Snakemake merges the entries' dictionaries, the later winning key by key."""
        words: list[str] = []
        joined = False
        for action, group in _split(list(self.options), _parser()):
            words += group
            if action is not None and action.dest == "config" and not joined:
                words.append(entry)
                joined = True
        return replace(self, options=tuple(words if joined else [*words, "--config", entry]))


def _parser() -> argparse.ArgumentParser:
    from snakemake.cli import get_argument_parser

    return get_argument_parser()


def _split(argv: list[str], parser: argparse.ArgumentParser) -> list[tuple[argparse.Action | None, list[str]]]:
    """argv as (action, [option and its values]) groups, the way argparse consumes them; targets get None."""
    actions = parser._option_string_actions
    groups: list[tuple[argparse.Action | None, list[str]]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            groups.extend((None, [rest]) for rest in argv[i + 1 :])
            break
        name, inline = (token.split("=", 1) + [None])[:2] if token.startswith("--") else (token, None)
        if name not in actions and len(token) > 2 and token[0] == "-" and token[1] != "-" and token[:2] in actions:
            name, inline = token[:2], token[2:]  # -j50, -c2
        action = actions.get(name)
        if action is None:
            groups.append((None, [token]))
            i += 1
            continue
        if inline is not None:
            groups.append((action, [name, inline]))
            i += 1
            continue
        values: list[str] = []
        i += 1
        if action.nargs in (None, 1):
            values, i = argv[i : i + 1], i + 1
        elif action.nargs in ("?", "*", "+"):
            limit = 1 if action.nargs == "?" else len(argv)
            while i < len(argv) and len(values) < limit and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
        groups.append((action, [name, *values]))
    return groups


def _program(argv0: str) -> tuple[str, ...]:
    """`snakemake` when that name finds the same program on PATH, else the program's own path."""
    if Path(argv0).name == "__main__.py":
        return (sys.executable, "-m", "snakemake")
    found = shutil.which("snakemake")
    started = shutil.which(argv0) or argv0
    if found and Path(found).resolve() == Path(started).resolve():
        return ("snakemake",)
    return (str(Path(started).absolute()),)


def _absolute(value: str, bases: list[Path]) -> str:
    """A relative path made absolute against the first base where it exists (else left as given)."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    for base in bases:
        if (base / path).exists():
            return str((base / path).resolve())
    return value


def from_argv(argv: list[str], workdir: str, configfiles: list[str], snakefile: str) -> Invocation:
    """The study's invocation from Snakemake's argv.

    workdir: the directory Snakemake works in (os.getcwd() in the Snakefile);
    configfiles: the --configfile paths as Snakemake resolved them (absolute, in order);
    snakefile: the main Snakefile's absolute path.
    """
    parser = _parser()
    groups = [(a, words) for a, words in _split(list(argv[1:]), parser) if a is not None and a.dest not in ONE_SHOT]
    # A repeated plain option counts once, as argparse keeps its last value.
    last = {a.dest: n for n, (a, _) in enumerate(groups) if isinstance(a, argparse._StoreAction)}
    bases = [Path(workdir), Path(snakefile).parent]
    options: list[str] = []
    for n, (action, words) in enumerate(groups):
        if isinstance(action, argparse._StoreAction) and last[action.dest] != n:
            continue
        name, values = words[0], words[1:]
        if action.dest == "configfile":
            values = list(configfiles)
        elif action.dest == "snakefile":
            values = [snakefile]
        elif action.dest == "directory":
            values = [workdir]
        elif action.dest in PATH_OPTIONS:
            values = [_absolute(v, bases) for v in values]
        elif action.dest == "config":
            values = [v for v in values if v.split("=", 1)[0] not in REPORT_ONLY_CONFIG]
            if not values:
                continue
        options += [name, *values]
    return Invocation(_program(argv[0]), str(Path(workdir).absolute()), tuple(options))


def current(workflow) -> Invocation:
    """This Snakemake process's invocation (call it from the Snakefile, where `workflow` is defined)."""
    configfiles = [str(path) for path in workflow.config_settings.configfiles]
    return from_argv(sys.argv, os.getcwd(), configfiles, str(Path(workflow.main_snakefile).absolute()))


def _parsed(argv: list[str]) -> argparse.Namespace | None:
    """Snakemake's own reading of `argv` (profiles included); None where it is not a Snakemake command
    line this version parses (the API, a test runner)."""
    from snakemake.cli import parse_args

    program = Path(argv[0]) if argv else Path()
    if "snakemake" not in (program.name, program.parent.name):  # `snakemake` or `python -m snakemake`
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its "Using profile ..." line, printed once already
            return parse_args(list(argv[1:]))[1]
    except (SystemExit, Exception):
        return None


@dataclass(frozen=True)
class Command:
    """What a Snakemake command line asks of this start, as Snakemake reads it (profiles included)."""

    executor: str  # 'local' where none is named; a dry run names the one the real run would use
    forced: tuple[bool, frozenset[str]]  # see forced()
    targets: tuple[str, ...]  # the files and rules named to build
    rerun_triggers: frozenset[str]  # Snakemake's names: mtime, params, input, software-env, code
    dry_run: bool = False  # -n: nothing is submitted or trained


def command(argv: list[str]) -> Command | None:
    """This start's command line read once; None where `argv` is not a Snakemake command line this
    version parses (the API, a test runner)."""
    args = _parsed(argv)
    if args is None:
        return None
    names = set(args.forcerun or ()) | (set(args.targets or ()) if args.force else set())
    triggers = frozenset(trigger.name.lower().replace("_", "-") for trigger in args.rerun_triggers)
    return Command(
        args.executor or "local",
        (bool(args.forceall), frozenset(names)),
        tuple(args.targets or ()),
        triggers,
        bool(args.dryrun),
    )


def forced(argv: list[str]) -> tuple[bool, frozenset[str]]:
    """What this invocation forces: (everything, the rules and files named): --forceall; --forcerun's
    names; --force's targets."""
    found = command(argv)
    return found.forced if found else (False, frozenset())


def executor(argv: list[str]) -> str | None:
    """The executor this invocation runs its jobs with, as Snakemake resolves it from the command
    line, a --profile (or SNAKEMAKE_PROFILE) and the workflow profile: 'local' where none names one;
    None where `argv` is not a Snakemake command line this version parses (the API, a test runner).
    A dry run (`-n`) names the executor the real run would use."""
    found = command(argv)
    return found.executor if found else None
