"""The study's answer from tables whose answer is known: every sentence comes from a number of the
tables, and what the tables cannot tell is said as such."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from scalebench.analysis import answer, collectives, verdicts, waterfall
from scalebench.analysis.scaling import scaling
from scalebench.timing.step_split import CRITICAL_PATH

pytestmark = pytest.mark.unit


def cell(backend: str, gpus: int, seed: int, parts: tuple, variant: str = "", width: int = 1, **extra) -> dict:
    epoch = sum(parts)
    return {
        "source": "scalebench",
        "framework": "torch",
        "backend": backend,
        "variant": variant,
        "model_width": width,
        "gpus": gpus,
        "seed": seed,
        "status": "ok",
        "train_time_s": 10 * epoch,
        "steady_epoch_s": epoch,
        "images_per_s": 100.0 * gpus / epoch,
        "iou": 0.9,
        "images_per_s_per_gpu": 100.0 / epoch,
        "time_to_target_s": math.nan,
        **dict(zip(CRITICAL_PATH, parts, strict=True)),
        **extra,
    }


def study(comm: dict[str, float], seeds=(1, 2, 3)) -> pd.DataFrame:
    rows = []
    for backend, seconds in comm.items():
        for seed in seeds:
            jitter = 0.01 * seed
            rows.append(cell(backend, 1, seed, (8.0 + jitter, 0.0, 0.0, 0.2, 0.1)))
            rows.append(cell(backend, 4, seed, (2.2 + jitter, 0.3, seconds, 0.05, 0.05)))
    return pd.DataFrame(rows)


def collectives_table(backend: str, gpus: int, gradient_busbw: float, plateau: float) -> pd.DataFrame:
    rows = [
        {
            "framework": "torch",
            "backend": backend,
            "variant": "",
            "gpus": gpus,
            "seed": 1,
            "op": "all_reduce",
            "size": size,
            "bytes": nbytes,
            "busbw_gbps": busbw,
            "latency_us": 1.0,
            "reason": "",
        }
        for size, nbytes, busbw in (
            ("sweep", 1024, 0.01),
            ("gradient", 2_000_000, gradient_busbw),
            ("sweep", 2**26, plateau),
        )
    ]
    return collectives.typed(pd.DataFrame(rows))


def facts_of(runs: pd.DataFrame, collected: pd.DataFrame | None = None) -> dict:
    collected = collected if collected is not None else collectives.typed(pd.DataFrame())
    table, found = waterfall.waterfall(runs), verdicts.verdicts(runs)
    return answer.answer(runs, scaling(runs), table, found, collected)


def test_the_best_backend_its_efficiency_its_verdict_its_largest_loss_and_its_bound():
    runs = study({"horovod": 1.0, "native": 2.0})
    facts = facts_of(runs, collectives_table("horovod", 4, gradient_busbw=0.3, plateau=3.0))
    assert json.loads(json.dumps(facts)) == facts  # what answer.json holds
    (torch,) = facts["frameworks"]
    best = torch["best"]
    assert (torch["gpus"], torch["base_gpus"], best["backend"], best["seeds"]) == (4, 1, "horovod", 3)
    epoch_4 = 3.6 + 0.02  # mean over seeds 1-3
    paired = [(8.3 + 0.01 * seed) / (3.6 + 0.01 * seed) / 4 for seed in (1, 2, 3)]  # scaling.csv's paired t
    assert best["efficiency"] == pytest.approx(sum(paired) / 3)
    assert best["efficiency_low"] < best["efficiency"] < best["efficiency_high"]
    assert torch["versus"]["backend"] == "native" and torch["versus"]["verdict"].startswith("faster by")
    assert torch["loss"]["term"] == "exposed_comm" and torch["loss"]["seconds"] == pytest.approx(1.0)
    assert torch["loss"]["share"] == pytest.approx(1.0 / epoch_4)
    assert torch["reduction"]["bound"] == "latency" and torch["reduction"]["share"] == pytest.approx(0.1)
    text = " ".join(torch["sentences"])
    assert f"torch at 4 GPUs: horovod is the fastest, at a parallel efficiency of {best['efficiency']:.2f}" in text
    assert "against 1 GPU (3 seeds)." in text  # one GPU, not "1 GPUs"
    assert f"Against native: {torch['versus']['verdict']}." in text
    assert f"Its largest term: exposed communication costs {100 / epoch_4:.0f}% of the 4-GPU epoch (1 s)." in text
    ideal = (8.3 + 0.02) / 4
    assert (
        f"It loses {epoch_4 - ideal:.3g} s of each 4-GPU epoch to scaling ({epoch_4:.3g} s, ideal {ideal:.3g} s)."
        in text
    )
    assert "10% of the 3 GB/s it reaches at 67.1 MB: latency-bound" in text
    assert torch["width"] is None and facts["notes"] == []


def test_a_reduction_near_its_plateau_is_bandwidth_bound_and_an_unmeasured_one_says_why():
    runs = study({"horovod": 1.0, "native": 2.0})
    (torch,) = facts_of(runs, collectives_table("horovod", 4, gradient_busbw=2.4, plateau=3.0))["frameworks"]
    assert torch["reduction"]["bound"] == "bandwidth"
    (torch,) = facts_of(runs)["frameworks"]
    assert torch["reduction"] == {"reason": "no cell at this count measured its collectives"}
    assert "Its collectives were not measured at 4 GPUs: no cell at this count measured" in " ".join(torch["sentences"])


def test_the_smallest_width_at_which_exposed_communication_outgrows_compute_growth():
    rows = []
    for width, comm in ((1, 0.1), (4, 0.6), (16, 3.0)):
        variant = f"width{width}"
        for seed in (1, 2):
            rows.append(cell("native", 1, seed, (8.0 * width, 0, 0, 0.1, 0.1), variant=variant, width=width))
            rows.append(cell("native", 4, seed, (2.5 * width, 0.1, comm, 0.03, 0.03), variant=variant, width=width))
    (torch,) = facts_of(pd.DataFrame(rows))["frameworks"]
    # compute growth is 0.5 s per width unit: 0.5, 2.0, 8.0 against exposed communication 0.1, 0.6, 3.0
    assert torch["width"] == {"widths": [1, 4, 16], "crossover_width": None}
    rows = [r | ({"comm_exposed_critical_s": 2.5} if r["model_width"] == 4 and r["gpus"] == 4 else {}) for r in rows]
    (torch,) = facts_of(pd.DataFrame(rows))["frameworks"]
    assert torch["width"]["crossover_width"] == 4
    assert "first exceeds compute growth at model width 4 (widths 1, 4, 16 at 4 GPUs)" in " ".join(torch["sentences"])


def test_one_seed_one_gpu_count_or_nothing_finished_says_what_it_cannot_show():
    one_seed = facts_of(study({"horovod": 1.0, "native": 2.0}, seeds=(1,)))
    assert one_seed["frameworks"][0]["versus"]["verdict"] == "one seed: no verdict"
    assert any("One seed per cell" in note for note in one_seed["notes"])
    single = study({"native": 1.0})
    single = single[single["gpus"] == 4]
    (torch,) = facts_of(single)["frameworks"]
    assert torch["base_gpus"] == 4 and torch["best"]["efficiency"] is None
    assert "no smaller GPU count to scale from" in torch["sentences"][0]
    failed = study({"native": 1.0}).assign(status="failed")
    facts = facts_of(failed)
    assert facts["frameworks"] == [] and facts["notes"] == [
        "None of the study's 6 cells finished with status ok: nothing to answer yet."
    ]
