"""The host comparison on studies whose truth is known: a slow host is found with its size inside
the interval, noise alone names none, too few cells and one host say so, and the command that
reruns a slow node's cells parses as Snakemake reads it."""

from __future__ import annotations

import re
import shlex

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from scalebench.analysis import hosts as analysis
from scalebench.analysis.host_findings import host_findings
from scalebench.analysis.ranks import ranks_frame
from scalebench.cell import OWN_SOURCE
from scalebench.records.tables import KEYS, RANKS
from scalebench.rerun import Invocation

SLURM_PROFILE = str(REPO / "profiles" / "slurm")
STUDY = Invocation(("snakemake",), "/work/study", ("--profile", SLURM_PROFILE, "--config", "partition=gpu"))
HOSTS = [f"n{i}" for i in range(1, 7)]


def study(
    cells: int = 12,
    slow: dict[str, float] | None = None,
    noise: float = 0.02,
    on_slow_host: int = 8,
    epochs: int = 4,
    data_wait: float = 0.004,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ranks.csv and runs.csv of `cells` 4-rank cells, each on two hosts (two ranks each), with
    per-cell speeds that differ tenfold; `slow` hosts compute that factor longer; the first slow
    host is in `on_slow_host` of the cells. Ranks wait for the slowest inside the reduction."""
    rng = np.random.default_rng(seed)
    slow = slow or {}
    marked = next(iter(slow), "n3")
    others = [h for h in HOSTS if h != marked]
    rows, runs = [], []
    for index in range(cells):
        pair = (
            [marked, others[index % len(others)]]
            if index < on_slow_host
            else list(rng.choice(others, 2, replace=False))
        )
        keys = {"framework": "torch", "backend": "native", "variant": "", "gpus": 4, "seed": index + 1}
        base = rng.uniform(1.0, 10.0)  # the cell's own speed: backend, GPU count, the hour it ran
        for epoch in range(1, epochs + 1):
            computes = [
                base * slow.get(host, 1.0) * rng.lognormal(0, noise) * (1.5 if epoch == 1 else 1.0)
                for host in (pair[0], pair[0], pair[1], pair[1])
            ]
            epoch_time = max(computes) * 1.1
            for rank, (host, compute) in enumerate(zip((pair[0], pair[0], pair[1], pair[1]), computes)):
                wait = base * data_wait * rng.lognormal(0, 0.1)
                rows.append(
                    {
                        **keys,
                        "start": "2030-01-01T00:00:00+00:00",
                        "slurm_job_id": str(100 + index),
                        "epoch": epoch,
                        "unsteady": False,
                        "rank": rank,
                        "host": host,
                        "epoch_time_s": epoch_time,
                        "compute_s": compute,
                        "comm_exposed_s": max(computes) - compute + 0.05 * base,
                        "data_wait_s": wait,
                        "rest_s": epoch_time - max(computes) - wait,
                    }
                )
        runs.append({"source": OWN_SOURCE, **keys, "status": "ok", "hosts": ",".join(sorted(set(pair)))})
    return ranks_frame(pd.DataFrame(rows, columns=RANKS.names)), pd.DataFrame(runs)


def row(table: pd.DataFrame, host: str, measure: str = "compute") -> pd.Series:
    return table[(table["host"] == host) & (table["measure"] == measure)].iloc[0]


def test_a_host_ten_percent_slower_in_8_of_12_cells_is_found_with_its_size_inside_the_interval():
    ranks, runs = study(slow={"n3": 1.10})
    table = analysis.host_table(ranks, runs, STUDY)
    found = row(table, "n3")
    assert found["cells"] == 8 and found["rank_epochs"] == 8 * 3 * 2  # steady epochs: after the first
    assert found["low"] < 1.10 < found["high"] and found["low"] > 1.0
    assert re.fullmatch(r"slower by (9|10|11)% \(\d+-\d+%\) in 8 cells", found["verdict"]), found["verdict"]
    assert found["slow_node"]
    assert list(table.loc[table["slow_node"], "host"]) == ["n3"]
    # the others wait for it inside the reduction: longer exposed communication, which names no slow node
    waiting = table[(table["measure"] == "exposed communication") & (table["host"] != "n3")]
    assert not waiting["slow_node"].any()


def test_noise_of_two_percent_without_a_slow_host_names_none():
    for seed in range(5):
        ranks, runs = study(seed=seed)
        table = analysis.host_table(ranks, runs, STUDY)
        assert not table["slow_node"].any(), table[["host", "measure", "verdict"]]
        verdicts = table.loc[table["measure"] == "compute", "verdict"]
        assert all(v == "no different" or v.startswith("too few cells") for v in verdicts), verdicts
        assert table["rerun"].isna().all()


def test_one_cell_is_too_few_to_tell_and_one_host_has_nothing_to_compare():
    ranks, runs = study(cells=1, slow={"n3": 1.5}, on_slow_host=1)
    table = analysis.host_table(ranks, runs, STUDY)
    assert set(table["verdict"]) == {"too few cells to tell (1 shared with another host; 3 needed)"}
    assert table["low"].isna().all() and not table["slow_node"].any()
    assert row(table, "n3")["ratio"] == pytest.approx(1.5, rel=0.05)  # the estimate is shown, not its interval

    alone = ranks.assign(host="laptop")
    table = analysis.host_table(alone, runs.assign(hosts="laptop"), STUDY)
    assert list(table["verdict"]) == [analysis.ONE_HOST] * 3 and table["ratio"].isna().all()
    assert host_findings(table, pd.DataFrame(columns=["measure", "verdict"])).sentences == [
        "One host (laptop) ran every rank: no other host to compare it with."
    ]


def test_a_cell_whose_epochs_ran_on_two_node_sets_counts_each_sets_epochs_apart():
    # requeued after epoch 3 and resumed in another allocation: two comparisons, not one average
    ranks, runs = study(cells=1, slow={"n3": 1.5}, on_slow_host=1, epochs=6)
    one = analysis.host_table(ranks.assign(node_set=0), runs, STUDY)
    two = analysis.host_table(ranks.assign(node_set=(ranks["epoch"] > 3).astype(int)), runs, STUDY)
    assert (row(one, "n3")["cells"], row(two, "n3")["cells"]) == (1, 2)
    assert row(two, "n3")["rank_epochs"] == row(one, "n3")["rank_epochs"]  # the same epochs, grouped apart


def test_a_data_wait_twice_the_others_is_no_slow_node_when_it_is_a_sliver_of_the_epoch():
    ranks, runs = study()
    ranks.loc[ranks["host"] == "n3", "data_wait_s"] *= 2  # 0.4% of an epoch more
    found = row(analysis.host_table(ranks, runs, STUDY), "n3", "data wait")
    assert found["ratio"] == pytest.approx(2, rel=0.1) and found["low"] > 1
    assert found["verdict"].startswith("no different: longer by") and found["verdict"].endswith("under 1% of an epoch")
    assert not found["slow_node"]


def test_cells_on_one_host_and_cells_not_ok_are_left_out_with_the_reason():
    ranks, runs = study(cells=4)
    ranks.loc[ranks["seed"] == 1, "host"] = "n1"  # every rank of cell 1 on one host
    runs.loc[runs["seed"] == 2, "status"] = "failed"
    runs["step_split_reason"] = None
    no_rows = {"source": OWN_SOURCE, **dict(zip(KEYS, ("torch", "native", "", 4, 9))), "status": "ok", "hosts": "n1"}
    runs = pd.concat([runs, pd.DataFrame([no_rows | {"step_split_reason": "not recorded (predates)"}])])
    reasons = dict(zip(runs["seed"], analysis.left_out(runs.reset_index(drop=True), ranks)))
    assert reasons == {
        1: analysis.SINGLE_HOST_CELL,
        2: "status failed",
        3: "",
        4: "",
        9: "no per-rank rows: not recorded (predates)",
    }


def test_the_rerun_command_excludes_the_slow_node_and_forces_exactly_the_cells_it_ran():
    from snakemake.cli import parse_args, parse_config

    ranks, runs = study(slow={"n3": 1.3})
    table = analysis.host_table(ranks, runs, STUDY, exclude=["n9"])
    command = row(table, "n3")["rerun"]
    findings = host_findings(table, pd.DataFrame(columns=["measure", "verdict"]))
    assert findings.slow_nodes == ["n3"] and findings.rerun == command
    assert row(table, "n3")["low"] < 1.3 < row(table, "n3")["high"]
    assert findings.sentences[0].startswith("Host n3 is slower than the others")
    assert f"compute {row(table, 'n3')['verdict']}." in findings.sentences[0]
    words = shlex.split(command.split(" && ", 1)[1])
    _, args = parse_args(words[1:])
    # Snakemake reads the study's own override and the exclusion, merged, with both nodes out
    assert parse_config(args.config) == {"partition": "gpu", "cluster": {"exclude": ["n3", "n9"]}}
    assert args.force and args.profile == [SLURM_PROFILE]
    ran_on_n3 = sorted(f"results/runs/torch/native/g4/s{seed}/metrics.jsonl" for seed in range(1, 9))
    assert sorted(args.targets) == ran_on_n3


def test_a_host_slower_by_less_than_the_margin_is_shown_but_not_named():
    ranks, runs = study(cells=40, on_slow_host=30, slow={"n3": 1.03})
    found = row(analysis.host_table(ranks, runs, STUDY), "n3")
    assert 1.0 < found["low"] < 1.03 < found["high"] < 1 + analysis.MARGIN
    assert found["verdict"].startswith("no different beyond 5%: slower by 3% (") and not found["slow_node"]
