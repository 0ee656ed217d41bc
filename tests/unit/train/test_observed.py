"""What the steps did against what the cell asked (train/observed.py): each mismatch names both."""

from __future__ import annotations

import pytest
from conftest import training_settings
from scalebench.refusal import Refused
from scalebench.train import observed


def steps(dtype: str | None = "float32", graphs: int = 0) -> dict:
    return {"compute_dtype": dtype, "compiled": observed.compiled_record("torch.compile (inductor)", graphs, 0, [])}


def test_steps_that_did_as_asked_have_no_problem():
    assert observed.step_problems(training_settings(), steps()) == []
    assert observed.step_problems(training_settings(precision="bf16"), steps("bfloat16")) == []
    assert observed.step_problems(training_settings(compile=True), steps(graphs=3)) == []


def test_a_precision_the_model_did_not_compute_in_names_the_setting_and_the_dtype():
    [problem] = observed.step_problems(training_settings(precision="bf16"), steps("float32"))
    assert problem.startswith("training.precision is bf16 (bfloat16), but the model computed in float32")
    # no step at all observed is no agreement either
    [problem] = observed.step_problems(training_settings(), steps(None))
    assert "computed in None" in problem


def test_compile_asked_and_nothing_compiled_or_the_reverse_is_named():
    [problem] = observed.step_problems(training_settings(compile=True), steps(graphs=0))
    assert problem == (
        "training.compile is true, but torch.compile (inductor) compiled no graph for the first step "
        "(the steps ran uncompiled)"
    )
    [problem] = observed.step_problems(training_settings(compile=False), steps(graphs=2))
    assert problem.startswith("training.compile is false, but torch.compile (inductor) compiled 2 graph(s)")
    both = observed.step_problems(training_settings(precision="bf16", compile=True), steps("float32", 0))
    assert len(both) == 2


def test_the_optimizers_rate_agrees_to_float32_rounding_and_no_further():
    assert observed.lr_problem(0.0010000000474974513, 0.001, 1, "now") == ""  # TensorFlow's float32 variable
    problem = observed.lr_problem(0.00075, 0.0015, 2, "after the epoch's steps")
    assert problem.endswith("sets 0.0015 in epoch 2, but the optimizer held 0.00075 after the epoch's steps")
    assert observed.lr_problem(0.001 * (1 + 1e-4), 0.001, 1, "now")


def test_a_mismatch_refuses_the_cell_with_every_problem_and_nothing_without_one():
    observed.check(["", ""])  # no problem: nothing raised
    with pytest.raises(Refused, match="first; second") as raised:
        observed.check(["first", "", "second"])
    assert isinstance(raised.value, observed.ObservedMismatch)


def test_run_json_keeps_few_recompile_reasons_and_short_ones():
    record = observed.compiled_record("XLA (jit_compile)", 9, 8, ["x" * 1000] * 8)
    assert (record["graphs"], record["recompiles"]) == (9, 8)
    assert len(record["recompile_reasons"]) == observed.MAX_REASONS
    assert all(len(reason) == 300 for reason in record["recompile_reasons"])
