"""What a cell's steps did, read back from the framework, against what the cell asked.

run.json keeps the settings under their own names (`precision`, `training.compile`, the
schedule's rate) and records beside them what the framework says happened: `compute_dtype`,
the dtype of the model's output inside a training step; `compiled`, the graphs the framework's
compiler built for the steps (torch.compile's Dynamo counters, the XLA-compiled traces of the
TensorFlow step) and its recompiles; and in each epoch record `lr`, the rate the optimizer held
after the epoch's steps, beside `scheduled_lr`, the rate lr_schedule.py computed.

A difference between asked and observed (bf16 asked, float32 computed; compile asked, nothing
compiled; the optimizer holding another rate than the schedule's) is a build or an environment
that silently does something else; no retry changes it, so the cell ends `refused` at once,
after its first step (the rate: after any epoch), naming both (refusal.py, outcome.py).
"""

from __future__ import annotations

import math
from typing import Protocol

from scalebench.refusal import Refused
from scalebench.settings import TrainingSettings

# training.precision -> the dtype the model's passes compute in (the frameworks' own names)
COMPUTE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# TensorFlow holds the rate in a float32 variable: 0.001 reads back as 0.0010000000474974513
LR_RELATIVE_TOLERANCE = 1e-6
# recompile reasons kept in run.json (a shape that changes every step would fill it)
MAX_REASONS = 5


class ObservedMismatch(Refused, RuntimeError):
    """The framework did something other than the cell asked (names both)."""


def compiled_record(compiler: str, graphs: int, recompiles: int, reasons: list[str]) -> dict:
    """run.json's `compiled`: what `compiler` built for the training steps of this process
    (graphs 0: the steps ran uncompiled), its recompiles and the first reasons for them."""
    return {
        "compiler": compiler,
        "graphs": int(graphs),
        "recompiles": int(recompiles),
        "recompile_reasons": [reason[:300] for reason in reasons[:MAX_REASONS]],
    }


def step_problems(training: TrainingSettings, steps: dict) -> list[str]:
    """What the first step did otherwise than asked ([] when it did as asked). `steps`: the
    framework's Steps.observed() (compute_dtype, compiled)."""
    problems = []
    asked = COMPUTE_DTYPES[training.precision]
    if steps["compute_dtype"] != asked:
        problems.append(
            f"training.precision is {training.precision} ({asked}), but the model computed in "
            f"{steps['compute_dtype']} in its first step (the dtype of its output)"
        )
    compiled = steps["compiled"]
    if training.compile and not compiled["graphs"]:
        problems.append(
            f"training.compile is true, but {compiled['compiler']} compiled no graph for the first step "
            "(the steps ran uncompiled)"
        )
    elif not training.compile and compiled["graphs"]:
        problems.append(
            f"training.compile is false, but {compiled['compiler']} compiled {compiled['graphs']} graph(s) "
            "for the first step"
        )
    return problems


def lr_problem(held: float, scheduled: float, epoch: int, when: str) -> str:
    """Why the rate the optimizer held in 1-based `epoch`, read back `when`, is not the
    schedule's ('' when it is)."""
    if math.isclose(held, scheduled, rel_tol=LR_RELATIVE_TOLERANCE, abs_tol=0.0):
        return ""
    return (
        f"the learning rate: the schedule (training.base_lr, lr_scaling, warmup_epochs, decay_every) "
        f"sets {scheduled:.6g} in epoch {epoch}, but the optimizer held {held:.6g} {when}"
    )


def check(problems: list[str]) -> None:
    """End the cell refused, naming what was asked and what was observed ('' problems are none)."""
    found = [problem for problem in problems if problem]
    if found:
        raise ObservedMismatch("; ".join(found))


class ObservedSteps(Protocol):
    """What the check reads of a framework's steps (train/interfaces.py Steps)."""

    def observed(self) -> dict: ...

    def optimizer_lr(self) -> float: ...


def check_first_step(steps: ObservedSteps, training: TrainingSettings, scheduled_lr: float, epoch: int) -> dict:
    """After the run's first step (0-based `epoch`): what the framework's steps did, against what the
    cell asked; a mismatch ends the cell refused, naming both. Returns the observed steps (for
    run.json). Reads no device, except TensorFlow's rate variable, once in the run."""
    observed = steps.observed()
    problems = step_problems(training, observed)
    problems.append(lr_problem(steps.optimizer_lr(), scheduled_lr, epoch + 1, "after the first step"))
    check(problems)
    return observed


def run_fields(steps: dict) -> dict:
    """The observed fields of run.json (beside `precision` and `training.compile`)."""
    return {"compute_dtype": steps["compute_dtype"], "compiled": steps["compiled"]}
