"""SLURM's answers in one table: a refusal is settled, anything else (busy, unreachable, unknown) is
asked again. Each message below is SLURM's own, as sbatch prints it (SLURM 22.05 to 24.x)."""

from __future__ import annotations

import pytest
from scalebench.cluster import slurm_answers

FAILED = "sbatch: error: Batch job submission failed: "
# SLURM's words for a job over a limit; the line before names which (a size or time limit, or a submit limit)
POLICY = FAILED + "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"

# (SLURM's message, what the table makes of it, words of its meaning)
ANSWERS = [
    (
        FAILED + "Invalid account or account/partition combination specified",
        slurm_answers.REFUSED,
        "an account that cannot submit",
    ),
    (
        "sbatch: error: invalid partition specified: gpux\n" + FAILED + "Invalid partition name specified",
        slurm_answers.REFUSED,
        "partition",
    ),
    (FAILED + "Invalid qos specification", slurm_answers.REFUSED, "QOS"),
    (FAILED + "Requested node configuration is not available", slurm_answers.REFUSED, "no node can satisfy"),
    (FAILED + "Node count specification invalid", slurm_answers.REFUSED, "more nodes than exist"),
    (FAILED + "Requested partition configuration not available now", slurm_answers.REFUSED, "partition's limits"),
    (FAILED + "Invalid generic resource (gres) specification", slurm_answers.REFUSED, "GRES"),
    (FAILED + "Invalid Trackable RESource (TRES) specification", slurm_answers.REFUSED, "TRES"),
    (FAILED + "Invalid feature specification", slurm_answers.REFUSED, "constraint"),
    (FAILED + "Requested time limit is invalid (missing or exceeds some limit)", slurm_answers.REFUSED, "time limit"),
    ("sbatch: error: AssocMaxWallDurationPerJobLimit\n" + POLICY, slurm_answers.REFUSED, "policy violation"),
    (FAILED + "Access/permission denied", slurm_answers.REFUSED, "permission"),
    (FAILED + "Requested reservation is invalid", slurm_answers.REFUSED, "reservation"),
    (FAILED + "Invalid wckey specification", slurm_answers.REFUSED, "workload characterisation key"),
    ("sbatch: unrecognized option '--gpus-per-tusk=1'", slurm_answers.REFUSED, "an option sbatch refuses"),
    ("sbatch: error: Invalid --time specification", slurm_answers.REFUSED, "an option value"),
    (FAILED + "Socket timed out on send/recv operation", slurm_answers.BUSY, "did not answer in time"),
    (
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        slurm_answers.BUSY,
        "reached",
    ),
    (FAILED + "Unexpected message received", slurm_answers.BUSY, "out of turn"),
    (FAILED + "Zero Bytes were transmitted or received", slurm_answers.BUSY, "broke"),
    ("sbatch: error: QOSMaxSubmitJobPerUserLimit\n" + POLICY, slurm_answers.BUSY, "submit limit"),
    (
        "sbatch: error: AssocGrpSubmitJobsLimit\n" + FAILED + "Job violates accounting/QOS policy",
        slurm_answers.BUSY,
        "submit limit",
    ),
    ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", slurm_answers.BUSY, "full"),
    (FAILED + "Communication connection failure", slurm_answers.BUSY, "connection failed"),
    ("slurm_load_jobs error: Invalid job id specified", slurm_answers.REFUSED, "a job or node"),  # scontrol's
    ("slurm_load_node error: Invalid node name specified", slurm_answers.REFUSED, "a job or node"),
]


@pytest.mark.parametrize(("message", "kind", "means"), ANSWERS)
def test_each_answer_slurm_gives_is_a_refusal_or_asked_again(message, kind, means):
    answer = slurm_answers.classify(message)
    assert (answer.kind, means in answer.means) == (kind, True), answer


def test_every_row_of_the_table_has_slurm_s_message_above():
    rows = {slurm_answers.classify(message).pattern for message, _, _ in ANSWERS}
    assert rows == {answer.pattern for answer in slurm_answers.TABLE if answer.kind != slurm_answers.NO_SLURM}


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
