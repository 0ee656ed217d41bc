"""What SLURM's client commands mean when they fail: the one table of their messages.

A request the controller refused (an account, partition or QOS that does not exist, a request no
node can satisfy, a policy it violates) is refused again however often it is asked: the cell ends
at once with sbatch's words. A controller that is only busy or unreachable for a while (a
timeout, no answer, a message it did not expect, a submit limit that frees as jobs end) answers
differently a little later: the request is asked again after a growing delay, for the time
`cluster.busy_retry_min` allows. A message this table does not know counts as busy: asking again
costs a delay, while treating an unknown message as a refusal could end a cell that would run.

Both the pre-flight (`sbatch --test-only`, config/slurm_check.py) and the submission of a job
(config/slurm_plugin.py) read sbatch's answer here; a cell's holder (cluster/cell_holder.py) reads
squeue's, and a cell's launch (cluster/slurm.py: scontrol) scontrol's, the same way. The messages
are SLURM's own (slurm_errno.c of SLURM 22.05 to 24.x, and the reasons sbatch prints before them);
tests/unit/cluster/test_slurm_answers.py holds a test for each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

REFUSED = "refused"  # the controller's settled answer: asking again changes nothing
BUSY = "busy"  # no verdict on the request: ask again after a delay
NO_SLURM = "no SLURM"  # this machine's client has no cluster to ask (no configuration)

# The first delay between two asks, its growth per ask and its largest value (seconds).
FIRST_DELAY_S = 2.0
GROWTH = 2.0
LONGEST_DELAY_S = 60.0


@dataclass(frozen=True)
class Answer:
    """One row of the table: SLURM's words (a regular expression), what they mean, in a few words."""

    pattern: str
    kind: str
    means: str


# Read top to bottom; the first row whose words appear decides. A submit limit comes before the
# policy violation because SLURM words both "Job violates accounting/QOS policy (job submit limit,
# ...)" and names the limit (AssocMaxSubmitJobLimit, QOSMaxSubmitJobPerUserLimit) on the line before.
TABLE: tuple[Answer, ...] = (
    Answer(r"\b\w*Submit\w*Limit\b|submit limit reached", BUSY, "a submit limit reached (frees as jobs end)"),
    Answer(r"Socket timed out on send/recv operation", BUSY, "the controller did not answer in time"),
    Answer(r"Unable to contact slurm controller", BUSY, "the controller could not be reached"),
    Answer(r"Unexpected message received", BUSY, "the controller answered out of turn"),
    Answer(r"Zero Bytes were transmitted or received", BUSY, "the connection to the controller broke"),
    Answer(r"Communication connection failure|Transport endpoint is not connected", BUSY, "the connection failed"),
    Answer(r"temporarily unable to accept job|Resource temporarily unavailable", BUSY, "the controller is full"),
    Answer(r"Invalid account or account/partition combination", REFUSED, "an account that cannot submit there"),
    Answer(r"Invalid partition name specified|invalid partition specified", REFUSED, "a partition that does not exist"),
    Answer(r"Invalid qos specification", REFUSED, "a QOS that does not exist or is not allowed"),
    Answer(r"Requested node configuration is not available", REFUSED, "a request no node can satisfy"),
    Answer(r"Node count specification invalid|Invalid node count specification", REFUSED, "more nodes than exist"),
    Answer(r"Requested partition configuration not available", REFUSED, "beyond the partition's limits"),
    Answer(r"Invalid generic resource \(gres\) specification", REFUSED, "a GRES the cluster does not have"),
    Answer(r"Invalid Trackable RESource \(TRES\) specification", REFUSED, "a TRES the cluster does not have"),
    Answer(r"Invalid feature specification", REFUSED, "a node feature (constraint) that does not exist"),
    Answer(r"Requested time limit is invalid", REFUSED, "a time limit beyond the partition's"),
    Answer(r"Job violates accounting/QOS policy", REFUSED, "a policy violation (size or time limits)"),
    Answer(r"Access/permission denied|Access denied to requested reservation", REFUSED, "no permission"),
    Answer(r"Requested reservation is invalid", REFUSED, "a reservation that does not exist"),
    Answer(r"Invalid wckey specification", REFUSED, "an invalid workload characterisation key"),
    Answer(r"unrecognized option|invalid option|script arguments not permitted", REFUSED, "an option sbatch refuses"),
    Answer(r"Invalid --?[-\w]+ specification", REFUSED, "an option value sbatch refuses"),
    Answer(
        r"Invalid job id specified|Invalid node name specified", REFUSED, "a job or node the controller does not know"
    ),
    Answer(r"Could not establish a configuration source|Unable to process configuration file", NO_SLURM, "no config"),
)


def classify(message: str) -> Answer:
    """The row of TABLE that `message` (a SLURM command's output) matches first; an unknown message
    counts as busy."""
    for answer in TABLE:
        if re.search(answer.pattern, message, re.I):
            return answer
    return Answer("", BUSY, "a message this table does not know (asked again: a delay costs less than a lost cell)")


def delays(window_s: float) -> Iterator[float]:
    """The delays before each new ask within `window_s` seconds: 2, 4, 8, ... up to 60 s, the last
    one shortened so that they add up to at most the window."""
    delay, spent = FIRST_DELAY_S, 0.0
    while spent < window_s:
        step = min(delay, window_s - spent)
        yield step
        spent += step
        delay = min(delay * GROWTH, LONGEST_DELAY_S)
