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


def test_each_comparison_the_answer_rests_on_with_the_seeds_it_took_and_what_the_rounds_cost():
    """Three backends and two frameworks at 4 GPUs, replayed as rounds of matrix.seeds {initial: 2, max:
    3}: the answer states the best backend against each other one and the frameworks on each backend,
    each with the round that decided it (or why it is open), and the rounds' cells and GPU-hours."""
    from scalebench.analysis import rounds

    rows = []
    for framework, scale in (("torch", 1.0), ("tensorflow", 1.6)):
        for backend, comm in (("horovod", 1.0), ("native", 2.0), ("fsdp", 1.03)):
            for seed in (1, 2, 3):
                jitter = 0.01 * seed if backend != "fsdp" else 0.3 * (seed % 2)
                parts = (2.2 * scale + jitter, 0.3, comm, 0.05, 0.05)
                rows.append(cell(backend, 4, seed, parts, framework=framework, gpu_hours=0.1))
    runs = pd.DataFrame(rows)
    rules = rounds.Rules(initial=2, max=3, equivalence=0.02)
    history = rounds.replay(runs, rules)
    found = rounds.annotate(verdicts.verdicts(runs), history)
    facts = answer.answer(
        runs, scaling(runs), waterfall.waterfall(runs), found, collectives.typed(pd.DataFrame()), history, rules
    )
    assert json.loads(json.dumps(facts)) == facts
    torch = next(fact for fact in facts["frameworks"] if fact["framework"] == "torch")
    against = {c["b"] if c["a"] == "horovod" else c["a"]: c for c in torch["comparisons"] if c["kind"] == "throughput"}
    assert sorted(against) == ["fsdp", "native"]
    assert (against["native"]["state"], against["native"]["round"], against["native"]["decided_seeds"]) == (
        "different",
        1,
        2,
    )
    assert f"Against native: {against['native']['verdict']}, decided in round 1 at n = 2." in torch["sentences"]
    # fsdp's seeds scatter by a third: 3 seeds a side could not decide it, so round 1 stopped it, saying so
    assert against["fsdp"]["state"] == "open" and against["fsdp"]["open_reason"].startswith("throughput: about ")
    assert against["fsdp"]["open_reason"].endswith(" seeds a side to tell 5.9% (matrix.seeds max 3); stopped at 2")
    assert (
        f"Against fsdp: {against['fsdp']['verdict']}; still open: {against['fsdp']['open_reason']}."
        in torch["sentences"]
    )
    assert {(c["backend"], c["a"]) for c in facts["frameworks_compared"]} == {
        (b, "torch") for b in ("horovod", "native", "fsdp")
    }
    assert all(
        sentence.startswith("On ") and " at 4 GPUs, torch against tensorflow: " in sentence
        for sentence in facts["frameworks_sentences"]
    )
    spent = facts["rounds"]
    assert (spent["first_cells"], spent["added_cells"]) == (12, len(history[0].adds))
    assert spent["first_gpu_hours"] == pytest.approx(1.2) and spent["added_gpu_hours"] == pytest.approx(
        0.1 * spent["added_cells"]
    )
    assert spent["sentence"] in facts["notes"] and spent["sentence"].startswith(
        "Seeds until sure (matrix.seeds initial 2, max 3)"
    )


def test_an_imported_study_is_said_to_be_compared_on_its_epoch_time():
    runs = study({"horovod": 1.0, "native": 2.0})
    imported = runs.assign(source="2021", images_per_s=math.nan)
    facts = facts_of(pd.concat([runs, imported], ignore_index=True))
    assert any(note.startswith("Imported study 2021: its logs record no images per second") for note in facts["notes"])
