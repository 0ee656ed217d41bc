"""Requests SLURM would refuse, found before any train job is submitted, and never resubmitted.

A partition or account that does not exist, more nodes than the partition has, a GPU request
on a cluster without GPU scheduling: sbatch refuses the job. Submitted one cell after
another, each would be refused the same way and, reported to Snakemake as a failed job,
resubmitted `retries` times. Instead, before any job is submitted, the planner (config/planning.py) groups the
cells that will be submitted by their sbatch request (partition, account, QoS, nodes, tasks,
GPUs, CPUs, memory, time and cluster.extra: the options snakemake-executor-plugin-slurm's own
get_submit_command and set_gres_string build from the train rule's resources) and asks
`sbatch --test-only` once per request. The cells of a refused request are left out with
sbatch's own message (the dry run says so, the report lists them); the others run. Where
--test-only cannot be asked (no sbatch here, an old SLURM or a site's wrapper without it, a
controller that does not answer) the check says it was skipped and why, and submission proceeds
as before.

sbatch's answer is read by cluster/slurm_answers.py's table, as at submission: a controller
that gives no verdict (busy, unreachable) is asked again after a growing delay within
`cluster.busy_retry_min`, and only then is the check skipped. A refusal that still comes at
submission (a request --test-only accepted, the longer time of a retry) is not resubmitted
either (config/slurm_plugin.py).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from scalebench.cell import Cell
from scalebench.cluster import slurm_answers

# the plugin's bookkeeping options, not part of what SLURM accepts or refuses
BOOKKEEPING = {"--parsable", "--job-name", "--output", "--comment", "-D", "--export=ALL"}
TIMEOUT_S = 60


class _Resources(dict):
    """Resources read as the plugin reads a job's: by key and by attribute."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(name) from error


@dataclass
class Findings:
    """What the check found: each refused cell's reason, and what to tell the user."""

    refused: dict[Cell, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def sbatch_options(resources: Mapping[str, Any], threads: int) -> list[str]:
    """The sbatch options the SLURM plugin submits a job with these (evaluated) resources, without its
    bookkeeping (job name, log file, comment, work folder). The account and partition as given: the
    plugin validates and guesses them, sbatch decides."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    job = SimpleNamespace(resources=_Resources(resources.items()), threads=threads)
    params = {
        "run_uuid": "scalebench-check",
        "slurm_logfile": "/dev/null",
        "comment_str": "rule_train",
        "account": f"-A {shlex.quote(str(resources['slurm_account']))}" if resources.get("slurm_account") else "",
        "partition": f"-p {shlex.quote(str(resources['slurm_partition']))}" if resources.get("slurm_partition") else "",
        "workdir": None,
    }
    words = shlex.split(get_submit_command(job, params) + set_gres_string(job))[1:]
    options: list[str] = []
    skip_value = False
    for word in words:
        if skip_value:
            skip_value = False
        elif word in BOOKKEEPING:
            skip_value = word not in ("--parsable", "--export=ALL")
        else:
            options.append(word)
    return options


def test_only(
    options: list[str],
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    window_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, str]:
    """Ask SLURM whether it would take a job with `options`: ('ok', its answer), ('refused', sbatch's
    message) or ('skipped', why it could not be asked). An answer that is no verdict (cluster/slurm_answers.py:
    busy) is asked again after a growing delay for `window_s` seconds (cluster.busy_retry_min), each
    new ask said on stderr."""
    command = ["sbatch", "--test-only", *options, "--wrap", "true"]
    delays = slurm_answers.delays(window_s)
    while True:
        try:
            result = run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        except FileNotFoundError:
            return "skipped", "sbatch is not on this machine's PATH"
        except (OSError, subprocess.SubprocessError) as error:
            answer, kind, means = f"sbatch --test-only did not answer: {error}", slurm_answers.BUSY, "no answer"
        else:
            answer = " ".join((result.stderr + result.stdout).split())
            if result.returncode == 0:
                return "ok", answer
            if re.search(r"test.only", answer, re.I):  # an sbatch (or a site's wrapper) that does not know the option
                return "skipped", f"this sbatch does not take --test-only ({answer[:300]})"
            found = slurm_answers.classify(answer)
            kind, means = found.kind, found.means
        if kind == slurm_answers.REFUSED:
            return "refused", answer
        if kind == slurm_answers.NO_SLURM:
            return "skipped", f"SLURM did not answer sbatch --test-only ({answer[:300]})"
        delay = next(delays, None)
        if delay is None:
            return "skipped", (
                f"SLURM gave no verdict on sbatch --test-only within cluster.busy_retry_min ({window_s / 60:g} min; "
                f"last answer: {answer[:300]})"
            )
        print(
            f"slurm check: sbatch --test-only got no verdict ({means}: {answer[:300]}); asking again in {delay:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        sleep(delay)


def check(
    cells: Iterable[Cell],
    resources_of: Callable[[Cell], tuple[Mapping[str, Any], int]],
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    window_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Findings:
    """Ask sbatch --test-only once per distinct request of `cells` (resources_of: a cell's evaluated
    train-rule resources and threads; window_s: how long a controller without a verdict is asked
    again); the cells of refused requests, with sbatch's message."""
    requests: dict[tuple[str, ...], list[Cell]] = {}
    for cell in cells:
        requests.setdefault(tuple(sbatch_options(*resources_of(cell))), []).append(cell)
    findings = Findings()
    refused = 0
    for options, members in requests.items():
        verdict, answer = test_only(list(options), run, window_s, sleep)
        if verdict == "skipped":
            findings.notes.append(
                f"slurm check skipped: {answer}; requests SLURM refuses fail at submission (not resubmitted)"
            )
            return findings
        if verdict == "refused":
            refused += 1
            for cell in members:
                findings.refused[cell] = f"SLURM refuses its job (sbatch --test-only {shlex.join(options)}): {answer}"
    findings.notes.append(
        f"slurm check: sbatch --test-only accepted {len(requests) - refused} of the {len(requests)} distinct "
        "request(s) of the cells to submit"
    )
    return findings


def node_cpus_problem(cpus_per_rank: int, partition: str | None, run=subprocess.run) -> str | None:
    """Why no node can hold one rank: cluster.cpus_per_rank above the CPUs of the largest node of the
    partition (sinfo's); None where it fits or sinfo cannot say."""
    command = ["sinfo", "--noheader", "--format=%c", *(["--partition", partition] if partition else [])]
    try:
        result = run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    counts = [int(match) for match in re.findall(r"\d+", result.stdout)] if result.returncode == 0 else []
    if not counts or cpus_per_rank <= max(counts):
        return None
    where = f"partition {partition}" if partition else "the cluster"
    return (
        f"config key 'cluster.cpus_per_rank': {cpus_per_rank} CPUs per rank, more than any node of {where} "
        f"has ({max(counts)}, sinfo)"
    )


def unknown_nodes_problem(
    exclude: list[str], run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> str | None:
    """Why cluster.exclude cannot be submitted: it names nodes SLURM does not know (sbatch refuses
    every job whose --exclude does), each named. Host lists (gpu[07-08]) are expanded by `scontrol
    show hostnames`, the cluster's nodes listed by `sinfo --Node`; None where every name is a node,
    or SLURM cannot be asked (the sbatch --test-only check then has the last word)."""
    if not exclude:
        return None
    listed = _answer(["sinfo", "--noheader", "--Node", "--format=%N"], run)
    if not listed:
        return None
    nodes = set(listed.split())
    names = []
    for entry in exclude:
        expanded = _answer(["scontrol", "show", "hostnames", entry], run)
        names += expanded.split() if expanded else [entry]
    unknown = [name for name in names if name not in nodes]
    if not unknown:
        return None
    shown = ", ".join(sorted(nodes)[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
    return (
        f"config key 'cluster.exclude': {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a node "
        f"SLURM knows (sinfo lists {shown}); sbatch would refuse every cell's job"
    )


def _answer(command: list[str], run: Callable[..., subprocess.CompletedProcess]) -> str:
    """What a SLURM command printed, or '' where it failed or did not answer."""
    try:
        result = run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def forced_cells(cells: Iterable[Cell], forced: tuple[bool, frozenset[str]]) -> list[Cell]:
    """The cells this invocation forces (rerun.forced: --forceall, or --force with a cell's output as
    a target, or --forcerun naming one or the train rule): finished or not, their jobs are submitted
    again, so the check asks for them too (a rerun without a node: cluster.exclude)."""
    everything, names = forced
    if everything or {"train", "train_variant"} & names:
        return list(cells)
    named = {os.path.normpath(name) for name in names}
    return [cell for cell in cells if {f"{cell.folder}/metrics.jsonl", f"{cell.folder}/run.json"} & named]
