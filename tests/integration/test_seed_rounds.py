"""The rounds of matrix.seeds {initial, max} through the real workflow, on CPU ranks of one rank each:
a backend slowed by a fifth is decided by the first seeds and nothing is added; two backends of the
same speed whose seeds scatter go on where a band of equivalence of 30% lets max seeds decide
them, and a start after the first round goes on from it; with the band of 2% the same seeds stop at
the first round, since max seeds could not decide them, and the answer says how many would; and a
damaged round file is decided again from the records, never a traceback.

Each step's time is a sleep of the fault hooks (SCALEBENCH_FAULT slow_cell, train/faults.py) that is
nearly all of it, so what the seeds show is the sleeps', on any machine: a few seconds a cell. For
the same reason every cell of a round runs at once (--cores as many as the round's cells, more than
this machine's two): a sleeping rank leaves its core to the others, so the rounds cost one cell's
time each, not three; and no cell saves a checkpoint or prediction images, which no round reads."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from conftest import run_snakemake, tiny_config
from paired_cells import study_data

pytestmark = pytest.mark.integration

STEP_S = 1.0  # each step's sleep: nearly all of a step of 4 images of 16 x 16 on one CPU core


def study(initial: int, most: int) -> dict:
    """torch's DDP and DataParallel on one rank each: the same step, but for the sleep; two steps an
    epoch of images so small that the step's compute, whose time a busy machine stretches several
    times over, stays a few percent of it."""
    matrix = {"frameworks": ["torch"], "backends": ["native", "dp"], "gpus": [1]}
    training = {"epochs": 4, "steps_per_epoch": 2, "checkpoint_every": 0, "predictions": 0}
    config = tiny_config(matrix=matrix, training=training)
    config["dataset"]["image_size"] = [16, 16]
    config["matrix"]["seeds"] = {"initial": initial, "max": most}
    return config


# the answer and its page, which need every table but no figure: the rounds, not the drawing, are tested
ANSWER = ("results/summary/answer.json", "results/report/landing.rst")


def slowed(native_s: float, dp_s: float, *more: str) -> dict[str, str]:
    return {"SCALEBENCH_FAULT": ",".join((f"slow_cell:*/native/*:{native_s}", f"slow_cell:*/dp/*:{dp_s}", *more))}


def summary(workdir, name: str) -> pd.DataFrame:
    return pd.read_csv(workdir / "results" / "summary" / name, dtype={"variant": str, "open_reason": str})


def test_a_backend_slower_by_a_fifth_is_decided_by_the_first_seeds_and_no_round_adds_one(tmp_path_factory, tmp_path):
    study_data(tmp_path_factory, tmp_path, study(3, 4))  # the prepared data, made once by the workflow
    # the first round's six cells at once
    result = run_snakemake(tmp_path, study(3, 4), "--cores", "6", *ANSWER, env=slowed(STEP_S, 1.2 * STEP_S))
    assert result.returncode == 0, result.stderr[-3000:]
    runs = summary(tmp_path, "runs.csv")
    assert sorted(runs["seed"]) == [1, 1, 2, 2, 3, 3] and set(runs["status"]) == {"ok"}
    assert not (tmp_path / "results/runs/torch/dp/g1/s4/run.json").exists()  # planned, never trained
    (rounds,) = summary(tmp_path, "rounds.csv").to_dict("records")
    assert (rounds["round"], rounds["added"], rounds["stopped"]) == (
        1,
        0,
        "every comparison the answer rests on is decided",
    )
    verdicts = summary(tmp_path, "verdicts.csv")
    (row,) = verdicts[verdicts["kind"] == "throughput"].to_dict("records")
    assert (row["a"], row["b"], row["state"], row["round"], row["decided_seeds"]) == ("native", "dp", "different", 1, 3)
    assert 1.1 < row["ratio"] < 1.3 and row["verdict"].startswith("faster by")
    answer = json.loads((tmp_path / "results/summary/answer.json").read_text())
    (torch,) = answer["frameworks"]
    assert f"Against dp: {row['verdict']}, decided in round 1 at n = 3." in torch["sentences"]
    assert answer["rounds"]["added_cells"] == 0 and answer["rounds"]["first_cells"] == 6
    assert answer["rounds"]["sentence"] in (tmp_path / "results/report/landing.rst").read_text()


def test_equal_backends_whose_seeds_scatter_go_on_while_max_seeds_can_decide_and_stop_where_they_cannot(
    tmp_path_factory, tmp_path
):
    """Both backends' odd seeds are a fifth slower: the same speeds, so no difference, and at 2 seeds an
    interval far wider than a band of 30% (about +-50%; a tenth, +-29%, sat on the band's edge and was
    decided at 2 seeds when the machine's own scatter was low). In that band 4 seeds a side could
    decide it (+-17%): round 1 adds seed 3, and with it (+-21%) the pair is equivalent (a busy
    machine's scatter may take a fourth). In the band of 2% (the default) those seeds' scatter would
    need hundreds of seeds a side: round 1 stops, and the answer says so."""
    odd = (f"slow_cell:*/s1:{0.2 * STEP_S}", f"slow_cell:*/s3:{0.2 * STEP_S}")
    config, env = study(2, 4), slowed(STEP_S, STEP_S, *odd)
    config["verdicts"] = {"equivalence": 0.3}
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    cores = ("--cores", "4")  # the first round's four cells at once, then the round's two
    first = run_snakemake(tmp_path, config, *cores, "results/plan/rounds/round-1.json", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    round_one = tmp_path / "results/plan/rounds/round-1.json"
    trained = {path: path.stat().st_mtime for path in (tmp_path / "results/runs").glob("torch/*/g1/s*/run.json")}
    assert len(trained) == 4 and json.loads(round_one.read_text())["round"] == 1
    added = sorted(f"{key['backend']}/s{key['seed']}" for key in json.loads(round_one.read_text())["adds"])
    assert added == ["dp/s3", "native/s3"]
    decided_then = round_one.stat().st_mtime

    result = run_snakemake(tmp_path, config, *cores, *ANSWER, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    # the second start went on from round 1: neither it nor the first cells ran again
    assert round_one.stat().st_mtime == decided_then
    assert all(path.stat().st_mtime == when for path, when in trained.items())
    runs, rounds = summary(tmp_path, "runs.csv"), summary(tmp_path, "rounds.csv")
    assert list(rounds["added"]) in ([2, 0], [2, 2, 0]) and list(rounds["open"])[-1] == 0
    seeds = list(range(1, len(rounds) + 2))
    assert runs.groupby("backend")["seed"].apply(sorted).to_dict() == {"dp": seeds, "native": seeds}
    verdicts = summary(tmp_path, "verdicts.csv")
    (row,) = verdicts[verdicts["kind"] == "throughput"].to_dict("records")
    assert (row["state"], row["round"], row["decided_seeds"]) == ("equivalent", len(rounds), len(rounds) + 1)
    assert row["verdict"] == f"no difference larger than 30% (n = {len(rounds) + 1})"
    answer = json.loads((tmp_path / "results/summary/answer.json").read_text())
    (torch,) = answer["frameworks"]
    other = row["b"] if row["a"] == torch["best"]["backend"] else row["a"]
    decided = f"decided in round {len(rounds)} at n = {len(rounds) + 1}."
    assert f"Against {other}: {row['verdict']}, {decided}" in torch["sentences"]
    trained = {path: path.stat().st_mtime for path in (tmp_path / "results/runs").glob("torch/*/g1/s*/run.json")}

    # the band of 2%, and round 1's file damaged (a truncated write, a hand edit): the start says so, and
    # the rounds are decided again from the records (nothing trains): the same seeds stop at round 1
    round_one.write_text('{"round": 1, "cells": ')
    config["verdicts"] = {"equivalence": 0.02}
    result = run_snakemake(tmp_path, config, *cores, *ANSWER, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "warning: the round file results/plan/rounds/round-1.json cannot be read (JSONDecodeError" in output
    assert "Traceback" not in output and json.loads(round_one.read_text())["adds"] == []
    assert all(path.stat().st_mtime == when for path, when in trained.items())
    runs, rounds = summary(tmp_path, "runs.csv"), summary(tmp_path, "rounds.csv")
    assert sorted(runs["seed"]) == [1, 1, 2, 2]  # the study's cells are those the rounds read
    (stopped,) = rounds.to_dict("records")
    verdicts = summary(tmp_path, "verdicts.csv")
    (row,) = verdicts[verdicts["kind"] == "throughput"].to_dict("records")
    assert row["state"] == "open" and pd.isna(row["round"])
    said = (
        r"throughput: (about \d+|more than 1000) seeds a side to (tell [\d.]+%|show no difference larger than 2%) "
        r"\(matrix\.seeds max 4\); stopped at 2"
    )
    assert re.fullmatch(said, row["open_reason"]), row["open_reason"]
    assert stopped["added"] == 0 and stopped["stopped"] == f"open, and no seed can be added: {row['open_reason']}"
    answer = json.loads((tmp_path / "results/summary/answer.json").read_text())
    (torch,) = answer["frameworks"]
    other = row["b"] if row["a"] == torch["best"]["backend"] else row["a"]
    said = f"Against {other}: {row['verdict']}; still open: {row['open_reason']}."
    assert said in torch["sentences"] and said in (tmp_path / "results/report/landing.rst").read_text()

    again = run_snakemake(tmp_path, config, *cores, "-n", *ANSWER, env=env)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
