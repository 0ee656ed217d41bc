"""The bill (config/bill.py, prediction.py, earlier_study.py): each cell to run predicted from the best
source there is, on records whose truth is known; the time limits it sets; bill.csv, its line and the
budget, as a start says them (config/planning.py)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from cell_records import write_cell
from conftest import tiny_config
from scalebench.analysis import round_outlook
from scalebench.cell import Cell
from scalebench.config import bill as bills
from scalebench.config import earlier_study, plan, planning
from scalebench.config.freshness import Verdict
from scalebench.config.prediction import EARLIER_STUDY, FORMULA, THIS_STUDY
from scalebench.config.resources import runtime_minutes
from scalebench.data.keys import prepared_key
from scalebench.records.tables import BILL, SUBMITTED
from test_plan import start


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The study's working directory (its cells' folders are relative to it)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


OVERHEAD_S = 7.0  # each measured cell's run besides its epochs at the steady time
EPOCHS = 3  # tiny_config's


def truth(gpus: int) -> float:
    """A weak-scaling epoch: compute 12 s over the ranks, plus latency 0.5 s and bandwidth 2 s per step."""
    return (12.0 + (0.5 if gpus > 1 else 0.0) + 2.0 * (gpus - 1) / gpus) / gpus


def study(schema: dict, gpus=(1, 2, 4, 8), seeds=(1, 2, 3, 4), **sections) -> plan.Study:
    config = tiny_config(
        matrix={"frameworks": ["torch"], "backends": ["native"], "gpus": list(gpus), "seeds": list(seeds)},
        training={"batch_per_gpu": 2},  # 28 training pairs: a batch on each of 8 ranks
    )
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return plan.Study.validate(config, schema)


def measure(studied: plan.Study, cell: Cell, epoch_s: float, root: Path = Path("results/runs"), **run) -> Path:
    """The records of `cell` finished ok with the study's settings: a slower first epoch, then
    `epoch_s` each, and a run OVERHEAD_S longer than its epochs at the steady time."""
    times = (epoch_s + 3.0,) + (epoch_s,) * (EPOCHS - 1)
    seconds = EPOCHS * epoch_s + OVERHEAD_S
    ended = f"2025-01-01T10:{int(seconds) // 60:02d}:{seconds % 60:06.3f}+00:00"
    settings = studied.settings(cell)
    record = {"nodes": 1, "start": "2025-01-01T10:00:00+00:00", "end": ended, "training": settings["training"]}
    folder = write_cell(
        root,
        cell.framework,
        cell.backend,
        cell.gpus,
        cell.seed,
        times=times,
        settings=settings,
        data_key=prepared_key(studied.config["dataset"]),
        run_extra={**record, **run},
        variant=cell.variant,
    )
    # no step split: the model infers communication from the fit, as for a record from before it
    from cell_records import without_split

    without_split(folder)
    return folder


def made_bill(studied: plan.Study, finished: dict[Cell, float], executor: str = "local") -> bills.Bill:
    for cell, epoch_s in finished.items():
        measure(studied, cell, epoch_s)
    verdicts = {cell: Verdict("current" if cell in finished else "new") for cell in studied.matrix.cells()}
    return bills.make_bill(studied, verdicts, executor)


def test_a_series_of_known_epoch_times_predicts_them_through_the_scaling_model(schema, workdir):
    studied = study(schema)
    # seeds 1-3 at 1, 2 and 4 GPUs, each 1% off the truth one way or the other
    finished = {Cell("torch", "native", g, s): truth(g) * (1 + 0.01 * (s - 2)) for g in (1, 2, 4) for s in (1, 2, 3)}
    made = made_bill(studied, finished)
    for gpus in (1, 2, 4, 8):  # a measured count's fourth seed, and 8 GPUs, which no cell ran
        estimate = made.estimates[Cell("torch", "native", gpus, 4)]
        expected = EPOCHS * truth(gpus) + OVERHEAD_S
        assert estimate.predicted_s == pytest.approx(expected, rel=1e-6), gpus
        assert estimate.low_s < expected < estimate.high_s
        assert (estimate.source, estimate.method) == (THIS_STUDY, "scaling model (weak form, 3 GPU counts)")
        assert "9 finished cell(s) of torch/native" in estimate.note and not estimate.lower_bound
    assert Cell("torch", "native", 2, 1) not in made.estimates  # finished: nothing to predict


def test_one_measured_gpu_count_gives_its_epoch_scaled_by_the_work_and_says_so(schema, workdir):
    studied = study(schema, gpus=(2, 4), seeds=(1, 2, 3))
    made = made_bill(studied, {Cell("torch", "native", 2, 1): 4.0, Cell("torch", "native", 2, 2): 5.0})
    same = made.estimates[Cell("torch", "native", 2, 3)]
    assert same.predicted_s == pytest.approx(EPOCHS * 4.5 + OVERHEAD_S) and same.low_s < same.predicted_s
    assert same.method == "measured at 2 GPUs (2 cell(s))" and "too few to fit" in same.note
    more = made.estimates[Cell("torch", "native", 4, 1)]
    # an epoch of a pass over the data: half the work per replica on twice the replicas, nothing extrapolated
    assert more.predicted_s == pytest.approx(EPOCHS * 4.5 / 2 + OVERHEAD_S)
    assert more.method == "scaled by the work from 2 GPUs" and more.lower_bound
    assert "no extrapolation of the scaling" in more.note and "a lower bound" in more.note


def test_with_fixed_steps_an_epoch_is_the_same_work_per_replica_at_every_count(schema, workdir):
    steps = study(schema, gpus=(2, 4), seeds=(1,), training={"steps_per_epoch": 5})
    fixed = made_bill(steps, {Cell("torch", "native", 2, 1): 4.0})
    assert fixed.estimates[Cell("torch", "native", 4, 1)].predicted_s == pytest.approx(EPOCHS * 4.0 + OVERHEAD_S)


def job(started_s: int, fixed_s: float, epoch_s: float, host: str = "n1") -> dict:
    """run.json's fields of a cell started `started_s` into the study on `host`, whose job held its
    epochs (a first epoch 3 s longer, as `measure` writes them) and `fixed_s` besides."""
    return {
        "start": f"2025-01-01T10:{started_s // 60:02d}:{started_s % 60:02d}+00:00",
        "launch_host": host,
        "job_s": EPOCHS * epoch_s + 3.0 + fixed_s,
        "job_s_source": "launch",
        "job_attempts": 1,
        "job_s_reason": None,
    }


def test_a_cold_first_cell_is_not_multiplied_into_the_cells_after_it(schema, workdir):
    """The first cell of a framework on a node pays a start the later ones do not (caches, the
    device's first use): its start-up predicts no other cell while a warm one was measured."""
    studied = study(schema, gpus=(1,), seeds=(1, 2, 3))
    measure(studied, Cell("torch", "native", 1, 1), 4.0, **job(0, 30.0, 4.0))  # the first: a cold start
    measure(studied, Cell("torch", "native", 1, 2), 4.0, **job(60, 5.0, 4.0))
    verdicts = {cell: Verdict("current" if cell.seed < 3 else "new") for cell in studied.matrix.cells()}
    estimate = bills.make_bill(studied, verdicts, "local").estimates[Cell("torch", "native", 1, 3)]
    # epochs at the steady 4 s, the first epoch's 3 s extra, and the warm cell's 5 s of start-up
    assert estimate.predicted_s == pytest.approx(EPOCHS * 4.0 + 3.0 + 5.0)
    assert "start-up from" not in estimate.note  # the series' own warm cells at its count: nothing to say


def test_the_start_up_comes_from_cells_that_started_as_many_ranks(schema, workdir):
    """More ranks take longer to start (their imports on the node's cores, the rendezvous): a cell's
    start-up is its own count's, the nearest measured count's where its own has none (said)."""
    studied = study(schema, gpus=(1, 2, 4), seeds=(1, 2, 3))
    measure(studied, Cell("torch", "native", 1, 1), 4.0, **job(0, 20.0, 4.0))  # the cold start
    measure(studied, Cell("torch", "native", 1, 2), 4.0, **job(30, 5.0, 4.0))
    measure(studied, Cell("torch", "native", 2, 1), 2.0, **job(60, 9.0, 2.0))
    finished = {Cell("torch", "native", 1, 1), Cell("torch", "native", 1, 2), Cell("torch", "native", 2, 1)}
    verdicts = {cell: Verdict("current" if cell in finished else "new") for cell in studied.matrix.cells()}
    made = bills.make_bill(studied, verdicts, "local")
    one, two = made.estimates[Cell("torch", "native", 1, 3)], made.estimates[Cell("torch", "native", 2, 2)]
    assert one.predicted_s == pytest.approx(EPOCHS * 4.0 + 3.0 + 5.0)
    assert two.predicted_s == pytest.approx(EPOCHS * 2.0 + 3.0 + 9.0)
    four = made.estimates[Cell("torch", "native", 4, 1)]
    assert "start-up from warm cells of the series at 2 GPUs" in four.note


def test_a_series_of_only_a_cold_start_takes_its_frameworks_warm_cells_else_says_cold(schema, workdir):
    studied = study(schema, gpus=(1,), seeds=(1, 2), matrix={"backends": ["native", "horovod"]})
    measure(studied, Cell("torch", "native", 1, 1), 4.0, **job(0, 30.0, 4.0))  # torch's first on n1
    measure(studied, Cell("torch", "horovod", 1, 1), 6.0, **job(60, 8.0, 6.0))
    measure(studied, Cell("torch", "horovod", 1, 2), 6.0, **job(120, 10.0, 6.0))
    finished = {Cell("torch", "native", 1, 1), Cell("torch", "horovod", 1, 1), Cell("torch", "horovod", 1, 2)}
    verdicts = {cell: Verdict("current" if cell in finished else "new") for cell in studied.matrix.cells()}
    estimate = bills.make_bill(studied, verdicts, "local").estimates[Cell("torch", "native", 1, 2)]
    # native's epochs, horovod's warm start-up (median of 8 + 3 and 10 + 3 s with their first epochs' extra)
    assert estimate.predicted_s == pytest.approx(EPOCHS * 4.0 + 12.0)
    assert "start-up from warm cells of torch's other backends" in estimate.note
    # the native cell alone: its cold start is all there is, and the note says so
    only = {Cell("torch", "native", 1, 1)}
    alone = {cell: Verdict("current" if cell in only else "new") for cell in studied.matrix.cells()}
    cold = bills.make_bill(studied, alone, "local").estimates[Cell("torch", "native", 1, 2)]
    assert cold.predicted_s == pytest.approx(EPOCHS * 4.0 + 3.0 + 30.0) and "a cold start" in cold.note


def test_cells_recorded_before_the_job_wall_predict_from_run_jsons_span_and_say_so(schema, workdir):
    """An older study's records, imported logs, a killed launch: no job_s; the bill says what it used."""
    studied = study(schema, gpus=(1,), seeds=(1, 2))
    measure(studied, Cell("torch", "native", 1, 1), 4.0)  # start to end only: EPOCHS x 4 s + OVERHEAD_S
    verdicts = {cell: Verdict("current" if cell.seed == 1 else "new") for cell in studied.matrix.cells()}
    estimate = bills.make_bill(studied, verdicts, "local").estimates[Cell("torch", "native", 1, 2)]
    assert estimate.predicted_s == pytest.approx(EPOCHS * 4.0 + OVERHEAD_S)
    assert "start-up from run.json's start to its end (no job wall recorded" in estimate.note


def test_nothing_measured_is_the_formula_an_upper_bound_not_a_prediction(schema, workdir):
    studied = study(schema, gpus=(1, 2), seeds=(1,))
    made = made_bill(studied, {})
    estimate = made.estimates[Cell("torch", "native", 2, 1)]
    config = studied.config
    assert (
        estimate.source == FORMULA
        and estimate.predicted_s == runtime_minutes(config, Cell("torch", "native", 2, 1)) * 60
    )
    assert math.isnan(estimate.low_s) and estimate.note == "nothing of torch/native finished yet"


def test_an_earlier_study_predicts_where_its_settings_match_and_names_the_setting_that_differs(schema, workdir):
    earlier_root = workdir / "earlier" / "results"
    then = study(schema, gpus=(1, 2, 4))
    for gpus in (1, 2, 4):
        measure(then, Cell("torch", "native", gpus, 1), truth(gpus), earlier_root / "runs", devices=["V100"])
    now = study(schema, gpus=(1, 2, 4, 8), seeds=(1,), budget={"from": str(earlier_root)})
    estimate = made_bill(now, {}).estimates[Cell("torch", "native", 8, 1)]
    assert estimate.source == EARLIER_STUDY and estimate.predicted_s == pytest.approx(EPOCHS * truth(8) + OVERHEAD_S)
    assert f"budget.from: {earlier_root}, 3 cell(s) on V100" in estimate.note
    # another model width there: not this study's work; the bill says which setting and falls back
    wider = study(schema, gpus=(1, 2, 4, 8), seeds=(1,), budget={"from": str(earlier_root)}, model={"width": 2})
    fallen = made_bill(wider, {}).estimates[Cell("torch", "native", 8, 1)]
    assert fallen.source == FORMULA
    assert fallen.note == f"budget.from: {earlier_root}'s torch/native cells differ in model.width (1 there, 2 here)"
    # compare.baseline's study is read where budget.from is unset, and a series of this study's own wins
    baseline = study(schema, gpus=(1, 2, 4), seeds=(1, 2), compare={"baseline": str(earlier_root)})
    assert earlier_study.study_folder(baseline.config) == (str(earlier_root), "compare.baseline")
    own = made_bill(baseline, {Cell("torch", "native", 1, 1): 10.0})
    assert own.estimates[Cell("torch", "native", 1, 2)].source == THIS_STUDY


def test_budget_from_must_name_a_study_with_records(schema, tmp_path):
    from scalebench.config import ConfigError

    with pytest.raises(ConfigError, match=r"config key 'budget.from': .*nowhere is not a folder"):
        study(schema, budget={"from": str(tmp_path / "nowhere")})
    (tmp_path / "results" / "summary").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"config key 'budget.from': .* holds no cell records"):
        study(schema, budget={"from": str(tmp_path / "results")})
    for bad in (0, -5):
        with pytest.raises(
            ConfigError, match=r"config key 'budget.max_gpu_hours': .*less than or equal to the minimum"
        ):
            study(schema, budget={"max_gpu_hours": bad})


def test_a_measured_prediction_sets_the_time_limit_with_its_margin_and_retries_grow_it(schema, workdir):
    time = {"base_min": 2, "per_epoch_min": 50, "floor_min": 3, "retry_factor": 2, "safety_factor": 1.5}
    studied = study(schema, gpus=(1, 2), seeds=(1, 2, 3), cluster={"time": time})
    made = made_bill(studied, {Cell("torch", "native", 1, 1): 100.0, Cell("torch", "native", 1, 2): 100.0})
    again, more = Cell("torch", "native", 1, 3), Cell("torch", "native", 2, 1)
    # measured at 1 GPU: 3 x 100 s + 7 s, times 1.5, plus base_min; well under the formula's 2 + 150 minutes
    expected = math.ceil(2 + (3 * 100 + OVERHEAD_S) * 1.5 / 60)
    assert made.time_limit(again) == expected and made.time_limit(again, attempt=2) == math.ceil(expected * 2)
    assert expected < runtime_minutes(studied.config, again)
    # a lower bound (more GPUs than measured) never asks for less than the formula
    assert made.time_limit(more) == runtime_minutes(studied.config, more)
    # and the floor stands
    tiny = made_bill(study(schema, gpus=(1,), seeds=(1, 2), cluster={"time": time}), {})
    assert tiny.time_limit(Cell("torch", "native", 1, 2)) >= 3


def test_a_held_cell_only_waits_at_its_first_attempt(schema, workdir):
    studied = study(schema, gpus=(1, 2), seeds=(1,))
    held = Cell("torch", "native", 2, 1)
    for cell in studied.matrix.cells():
        write_cell(Path("results/runs"), gpus=cell.gpus, status="running" if cell == held else "ok")
    verdicts = {
        Cell("torch", "native", 1, 1): Verdict("current"),
        held: Verdict("incomplete", "run.json says running", "SLURM job 7"),
    }
    made = bills.make_bill(studied, verdicts, "slurm")
    assert made.state(held) == bills.HELD and made.waits(held, 1) and not made.waits(held, 2)
    assert made.state(Cell("torch", "native", 1, 1)) == bills.FINISHED
    assert made.estimates[held].source == THIS_STUDY  # its waiting job's limit: the cell's own


def test_a_start_writes_the_bill_says_it_in_one_line_and_keeps_what_a_run_started(schema, workdir, capsys):
    studied = study(schema, gpus=(1, 2), seeds=(1, 2), training={"device": "cpu"})
    measure(studied, Cell("torch", "native", 1, 1), 10.0)
    monkeypatched = start("--cores", "2", declared_gpus=0)
    planning.plan_study(studied, monkeypatched, out=io.StringIO())
    rows = list(csv.DictReader(open(bills.BILL_FILE)))
    assert BILL.header_problem(list(rows[0])) == ""  # records/tables.py's columns, in order
    assert [(r["gpus"], r["seed"], r["state"], r["source"]) for r in rows] == [
        ("1", "1", "finished", ""),
        ("1", "2", "to run", "this study"),
        ("2", "1", "to run", "this study"),
        ("2", "2", "to run", "this study"),
    ]
    assert float(rows[1]["predicted_s"]) == pytest.approx(EPOCHS * 10.0 + OVERHEAD_S)
    assert float(rows[1]["gpu_hours"]) == pytest.approx((EPOCHS * 10.0 + OVERHEAD_S) / 3600, rel=1e-3)
    # what this run started with, kept; a dry run afterwards keeps it as it was
    kept = Path(bills.SUBMITTED_FILE).read_text()
    assert SUBMITTED.header_problem(kept.splitlines()[0].split(",")) == ""
    assert [line.split(",")[3:5] for line in kept.splitlines()[1:]] == [["1", "2"], ["2", "1"], ["2", "2"]]
    out = io.StringIO()
    planning.plan_study(
        study(schema, gpus=(1, 2), seeds=(1, 2, 3), training={"device": "cpu"}), start("-n", declared_gpus=0), out=out
    )
    assert Path(bills.SUBMITTED_FILE).read_text() == kept
    (line,) = [text for text in out.getvalue().splitlines() if text.startswith("bill: ")]
    assert line.startswith("bill: 5 cells to run, ") and "GPU-hours predicted" in line
    assert "from this study's finished cells (5)" in line and "1 finished (results/plan/bill.csv)" in line
    assert "the largest torch/native g1 s2: 37 s" in line


def test_a_study_over_its_budget_is_refused_naming_the_total_the_largest_cells_and_the_key(schema, workdir):
    studied = study(schema, gpus=(1, 2), seeds=(1,), budget={"max_gpu_hours": 0.01}, training={"device": "cpu"})
    out = io.StringIO()
    with pytest.raises(plan.PlanError) as refused:
        planning.plan_study(studied, start("-n", declared_gpus=0), out=out)
    message = str(refused.value)
    assert message.startswith("config key 'budget.max_gpu_hours': the bill predicts ")
    assert (
        "GPU-hours for the 2 cells to run, 2 of them by the cluster.time formula, an upper bound, more than the "
        "0.01 allowed (the largest: torch/native g2 s1"
    ) in message
    assert "bill: 2 cells to run, at most " in out.getvalue()  # said before the refusal
    assert not Path(bills.SUBMITTED_FILE).exists()


def test_a_jobs_own_process_reads_nothing_and_asks_the_formula(schema, workdir, monkeypatch):
    studied = study(schema, gpus=(1, 2), seeds=(1, 2))
    measure(studied, Cell("torch", "native", 1, 1), 10.0)  # there, but a job's Snakemake does not read it
    monkeypatch.setattr(bills.cell_times, "read", lambda *_: pytest.fail("a job's process read a record"))
    made = planning.bill_study(studied, start("--cores", "2", main=False))
    cell = Cell("torch", "native", 1, 2)
    assert dict(made.estimates) == {} and made.time_limit(cell) == runtime_minutes(studied.config, cell)
    assert not made.waits(cell, 1)


def test_the_rounds_worst_case_is_billed_apart_and_counts_against_the_budget(schema, workdir):
    config = tiny_config(
        matrix={
            "frameworks": ["torch"],
            "backends": ["native", "horovod"],
            "gpus": [1, 2],
            "seeds": {"initial": 2, "max": 4},
        },
        training={"batch_per_gpu": 2, "device": "cpu"},
    )
    studied = plan.Study.validate(config, schema)
    out = io.StringIO()
    planning.plan_study(studied, start("-n", declared_gpus=0), out=out)
    rows = list(csv.DictReader(open(bills.BILL_FILE)))
    rounds = [(r["backend"], r["gpus"], r["seed"]) for r in rows if r["state"] == bills.ROUND]
    # the comparison the answer rests on: the two backends at the largest count, seeds 3 and 4 of each
    assert sorted(rounds) == [("horovod", "2", "3"), ("horovod", "2", "4"), ("native", "2", "3"), ("native", "2", "4")]
    first = [r for r in rows if r["state"] == bills.TO_RUN]
    assert len(first) == 8 and all(float(r["gpu_hours"]) > 0 for r in rows if r["state"] == bills.ROUND)
    worst = sum(float(r["gpu_hours"]) for r in rows if r["state"] == bills.ROUND)
    (line,) = [text for text in out.getvalue().splitlines() if text.startswith("bill: ")]
    assert line.startswith("bill: 8 cells to run, ")
    assert (
        f"the rounds: worst case (every open comparison to matrix.seeds' max) 4 cells more, {worst:.3g} GPU-hours; "
        "expected not known yet (the first seeds have not all finished: no scatter measured to expect from)"
    ) in line
    assert all(r["round_chance"] == "" for r in rows if r["state"] == bills.ROUND)
    # a budget the first seeds fit and the worst case does not: refused, the rounds named
    budget = sum(float(r["gpu_hours"]) for r in first) + worst / 2
    config["budget"] = {"max_gpu_hours": budget}
    with pytest.raises(plan.PlanError) as refused:
        planning.plan_study(plan.Study.validate(config, schema), start("-n", declared_gpus=0), out=io.StringIO())
    assert "GPU-hours for the 12 cells to run" in str(refused.value)
    assert "(4 of them the rounds' worst case, " in str(refused.value)


def test_a_machine_of_fewer_gpus_bills_the_rounds_at_its_own_largest_count(schema, workdir):
    """A local run on one GPU leaves the 2-GPU cells out, so its rounds compare at 1 GPU: the bill,
    made before the machine is counted, must price those cells too (the README's one-GPU dry run)."""
    config = tiny_config(
        matrix={
            "frameworks": ["torch"],
            "backends": ["native", "horovod"],
            "gpus": [1, 2],
            "seeds": {"initial": 2, "max": 3},
        },
        training={"batch_per_gpu": 2},  # device auto: a GPU each where the machine has them
    )
    out = io.StringIO()
    machine = {"CUDA_VISIBLE_DEVICES": "0,1"}  # as the README prints it: two GPUs seen, one declared
    planning.plan_study(plan.Study.validate(config, schema), start("-n", declared_gpus=1), env=machine, out=out)
    rows = list(csv.DictReader(open(bills.BILL_FILE)))
    rounds = [(r["backend"], r["gpus"], r["seed"], float(r["gpu_hours"])) for r in rows if r["state"] == bills.ROUND]
    assert sorted(row[:3] for row in rounds) == [("horovod", "1", "3"), ("native", "1", "3")]
    assert all(hours > 0 for *_, hours in rounds)
    assert "the rounds: worst case (every open comparison to matrix.seeds' max) 2 cells more" in out.getvalue()


@pytest.mark.parametrize(
    ("horovod_epochs", "expected_seeds"),
    [
        # about 10% apart, seeds 4% apart: one seed more a side decides it, before max 4
        ((1.10, 1.15), {3}),
        # seeds 60% apart and the backends 5%: 4 seeds a side cannot decide it, so no round adds one
        ((1.05, 1.70), set()),
    ],
)
def test_the_rounds_expected_cost_comes_from_the_first_seeds_scatter(schema, workdir, horovod_epochs, expected_seeds):
    config = tiny_config(
        matrix={
            "frameworks": ["torch"],
            "backends": ["native", "horovod"],
            "gpus": [2],
            "seeds": {"initial": 2, "max": 4},
        },
        training={"batch_per_gpu": 2, "device": "cpu"},
    )
    studied = plan.Study.validate(config, schema)
    native = (1.00, 1.04) if expected_seeds else (1.00, 1.60)
    epochs = {"native": native, "horovod": horovod_epochs}
    first = [Cell("torch", backend, 2, seed) for backend in epochs for seed in (1, 2)]
    for cell in first:
        measure(studied, cell, epochs[cell.backend][cell.seed - 1])
    rounds = frozenset(Cell("torch", backend, 2, seed) for backend in epochs for seed in (3, 4))
    verdicts = {cell: Verdict("current") for cell in first} | {cell: Verdict("new") for cell in rounds}
    made = bills.make_bill(studied, verdicts, "local", rounds=rounds, outlook=round_outlook.chances)
    rows = made.rows([(cell, None) for cell in verdicts])
    # every key a row holds is a column of bill.csv (round_chance_reason is not: the line says it)
    assert {key for row in rows for key in row} - {"round_chance_reason"} <= set(BILL.names)
    chances = {(r["backend"], r["seed"]): r["round_chance"] for r in rows if r["state"] == bills.ROUND}
    assert chances == {(b, s): float(s in expected_seeds) for b in epochs for s in (3, 4)}
    said = bills.line(rows)
    expected = sum(r["gpu_hours"] * r["round_chance"] for r in rows if r["state"] == bills.ROUND)
    worst = sum(r["gpu_hours"] for r in rows if r["state"] == bills.ROUND)
    assert f"worst case (every open comparison to matrix.seeds' max) 4 cells more, {worst:.3g} GPU-hours" in said
    assert (
        f"; expected {expected:.3g} GPU-hours ({2 * len(expected_seeds)} of them, from the first seeds' scatter)"
        in said
    )
    assert (expected > 0) == bool(expected_seeds)
