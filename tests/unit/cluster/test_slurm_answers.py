"""SLURM's answers in one table: a refusal is settled, anything else (busy, unreachable, unknown) is
asked again. Each message below is SLURM's own, as sbatch prints it (SLURM 22.05 to 24.x)."""

from __future__ import annotations

import pytest
from scalebench.cluster import slurm_answers

FAILED = "sbatch: error: Batch job submission failed: "

REFUSALS = [
    (FAILED + "Invalid account or account/partition combination specified", "an account that cannot submit"),
    ("sbatch: error: invalid partition specified: gpux\n" + FAILED + "Invalid partition name specified", "partition"),
    (FAILED + "Invalid qos specification", "QOS"),
    (FAILED + "Requested node configuration is not available", "no node can satisfy"),
    (FAILED + "Node count specification invalid", "more nodes than exist"),
    (FAILED + "Requested partition configuration not available now", "partition's limits"),
    (FAILED + "Invalid generic resource (gres) specification", "GRES"),
    (FAILED + "Invalid Trackable RESource (TRES) specification", "TRES"),
    (FAILED + "Invalid feature specification", "constraint"),
    (FAILED + "Requested time limit is invalid (missing or exceeds some limit)", "time limit"),
    (
        "sbatch: error: AssocMaxWallDurationPerJobLimit\n"
        + FAILED
        + "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
        "policy violation",
    ),
    (FAILED + "Access/permission denied", "permission"),
    (FAILED + "Requested reservation is invalid", "reservation"),
    ("sbatch: unrecognized option '--gpus-per-tusk=1'", "an option sbatch refuses"),
    ("sbatch: error: Invalid --time specification", "an option value"),
]

BUSY = [
    (FAILED + "Socket timed out on send/recv operation", "did not answer in time"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", "reached"),
    (FAILED + "Unexpected message received", "out of turn"),
    (FAILED + "Zero Bytes were transmitted or received", "broke"),
    (
        "sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
        + FAILED
        + "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
        "submit limit",
    ),
    ("sbatch: error: AssocGrpSubmitJobsLimit\n" + FAILED + "Job violates accounting/QOS policy", "submit limit"),
    ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", "full"),
    (FAILED + "Communication connection failure", "connection failed"),
]


@pytest.mark.parametrize(("message", "means"), REFUSALS)
def test_each_refusal_slurm_gives_is_settled(message, means):
    answer = slurm_answers.classify(message)
    assert answer.kind == slurm_answers.REFUSED and means in answer.means, answer


@pytest.mark.parametrize(("message", "means"), BUSY)
def test_a_busy_or_unreachable_controller_is_asked_again(message, means):
    answer = slurm_answers.classify(message)
    assert answer.kind == slurm_answers.BUSY and means in answer.means, answer


def test_an_unknown_message_is_asked_again_and_a_machine_without_slurm_is_said_so():
    unknown = slurm_answers.classify("sbatch: error: Batch job submission failed: Something new in SLURM 26")
    assert unknown.kind == slurm_answers.BUSY and "does not know" in unknown.means
    unconfigured = slurm_answers.classify(
        "sbatch: error: fetch_config: DNS SRV lookup failed\nsbatch: fatal: Could not establish a configuration source"
    )
    assert unconfigured.kind == slurm_answers.NO_SLURM


def test_the_delays_grow_to_a_minute_and_end_within_the_window():
    assert list(slurm_answers.delays(0)) == []
    assert list(slurm_answers.delays(10)) == [2, 4, 4]
    long = list(slurm_answers.delays(20 * 60))
    assert long[:6] == [2, 4, 8, 16, 32, 60] and max(long) == 60
    assert sum(long) == pytest.approx(20 * 60)
