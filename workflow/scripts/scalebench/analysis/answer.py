"""The study's answer (results/summary/answer.json and the report's first page): per framework, the
best backend at the largest GPU count with its efficiency and interval, how sure the study is that it
beats each other backend (each verdict with its seeds, and with matrix.seeds {initial, max} the round
that decided it or why it is still open), the largest term of its loss waterfall, whether its
gradient reduction is latency- or bandwidth-bound, and where the model width ran, the smallest width
at which exposed communication outgrows compute growth; the frameworks on each backend; what the
rounds added and cost; what an imported study's logs can be compared on.

Every sentence is generated from the tables (scaling.csv, waterfall.csv, verdicts.csv,
collectives.csv); a fact the tables cannot give is stated as such, with the reason, never guessed.
answer.json holds the same facts, so a site can gate on them in CI, and links (`gate`) the verdicts
of this study against the history of studies that the gate target writes (analysis/gate.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from scalebench.analysis import waterfall as losses
from scalebench.analysis.comparisons import answer_rows, best_series
from scalebench.analysis.rounds import Round, Rules, found_row, round_table
from scalebench.analysis.scaling import usable
from scalebench.cell import OWN_SOURCE

# the gradient reduction reaches less than this share of its own plateau bus bandwidth: latency-bound
LATENCY_BOUND_SHARE = 0.5
GRADIENT_OPS = ("all_reduce", "reduce")
# where this study's verdicts against the history of studies go (analysis/gate.py), once asked for
GATE = {
    "file": "results/summary/gate.json",
    "made_by": "the gate target (snakemake gate): this study against the history of studies (history.path)",
}


def number(value: Any) -> float | None:
    """A JSON number, or None for NaN / missing."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def series_name(backend: str, variant: str) -> str:
    return f"{backend} ({variant})" if variant else backend


def scaling_row(scaling: pd.DataFrame, framework: str, backend: str, variant: str, gpus: int) -> pd.Series | None:
    rows = scaling[
        (scaling["source"] == OWN_SOURCE)
        & (scaling["framework"] == framework)
        & (scaling["backend"] == backend)
        & (scaling["variant"].fillna("") == variant)
        & (scaling["gpus"] == gpus)
    ]
    return rows.iloc[0] if len(rows) else None


def runner_up(verdicts: pd.DataFrame, framework: str, backend: str, variant: str, gpus: int) -> dict | None:
    """The throughput verdict of the best backend against the next one at this count, if there is one."""
    rows = verdicts[
        (verdicts["kind"] == "throughput")
        & (verdicts["compared"] == "backends")
        & (verdicts["source"] == OWN_SOURCE)
        & (verdicts["framework"] == framework)
        & (verdicts["variant"] == variant)
        & (verdicts["gpus"] == gpus)
        & (verdicts["a"] == backend)
    ]
    if rows.empty:
        return None
    row = rows.sort_values("ratio", kind="stable").iloc[0]  # the closest competitor
    return {
        "backend": row["b"],
        "ratio": number(row["ratio"]),
        "low": number(row["low"]),
        "high": number(row["high"]),
        "p_holm": number(row["p_holm"]),
        "verdict": row["verdict"],
    }


def comparison(row: pd.Series) -> dict:
    """A verdict row the answer rests on, as answer.json holds it."""
    integer = lambda value: int(value) if pd.notna(value) else None  # noqa: E731
    return {
        "kind": row["kind"],
        "compared": row["compared"],
        "framework": row["framework"],
        "backend": row["backend"],
        "variant": row["variant"],
        "gpus": int(row["gpus"]),
        "a": row["a"],
        "b": row["b"],
        "ratio": number(row["ratio"]),
        "low": number(row["low"]),
        "high": number(row["high"]),
        "p_holm": number(row["p_holm"]),
        "seeds_a": int(row["seeds_a"]),
        "seeds_b": int(row["seeds_b"]),
        "state": row["state"],
        "bound": number(row["bound"]),
        "verdict": row["verdict"],
        "round": integer(row["round"]),
        "decided_seeds": integer(row["decided_seeds"]),
        "open_reason": row["open_reason"] if isinstance(row["open_reason"], str) else None,
    }


def comparison_text(found: dict) -> str:
    """A comparison's verdict with how many seeds it took (the round that decided it) or why it is open."""
    text = found["verdict"]
    if found["round"] is not None:
        text += f", decided in round {found['round']} at n = {found['decided_seeds']}"
    elif found["open_reason"]:
        text += f"; still open: {found['open_reason']}"
    return text


def comparison_sentence(found: dict, best: str) -> str:
    """'Against horovod: faster by 12% (8-16%; n = 3), decided in round 1.' (the best backend's view)."""
    other = found["b"] if found["a"] == best else found["a"]
    what = "Against" if found["kind"] == "throughput" else "To the target, against"
    return f"{what} {other}: {comparison_text(found)}."


def frameworks_sentence(found: dict) -> str:
    """'On native at 2 GPUs, torch against tensorflow: faster by 40% (31-50%; n = 3).'"""
    where = series_name(found["backend"], found["variant"])
    return f"On {where} at {gpus_text(found['gpus'])}, {found['a']} against {found['b']}: {comparison_text(found)}."


def largest_loss(table: pd.DataFrame, framework: str, backend: str, variant: str, gpus: int) -> dict:
    rows = table[
        (table["source"] == OWN_SOURCE)
        & (table["framework"] == framework)
        & (table["backend"] == backend)
        & (table["variant"] == variant)
        & (table["gpus"] == gpus)
    ]
    if rows.empty:
        return {"reason": f"no GPU count above the base: nothing lost to explain at {gpus} GPUs"}
    values = rows.set_index("term")
    largest = losses.largest_term(rows)
    if largest is None:
        return {"reason": rows["reason"].iloc[0] or "no term was measured"}
    return {
        "term": largest["term"],
        "seconds": number(largest["seconds"]),
        "share": number(largest["share"]),
        "ideal_s": number(values.loc["ideal", "seconds"]),
        "measured_s": number(values.loc["measured", "seconds"]),
    }


def reduction(collectives: pd.DataFrame, framework: str, backend: str, variant: str, gpus: int) -> dict:
    """The gradient reduction's bus bandwidth at the gradient size against the plateau the same
    backend reaches at its largest messages (median over seeds at each size, this GPU count)."""
    rows = collectives[
        (collectives["framework"] == framework)
        & (collectives["backend"] == backend)
        & (collectives["variant"] == variant)
        & (collectives["gpus"] == gpus)
        & collectives["op"].isin(GRADIENT_OPS)
    ]
    measured = rows[rows["busbw_gbps"].notna()]
    at_gradient = measured[measured["size"] == "gradient"]
    if at_gradient.empty:
        reasons = sorted(set(rows["reason"].dropna()) - {""})
        why = "; ".join(reasons) if reasons else "no cell at this count measured its collectives"
        return {"reason": why}
    op = at_gradient["op"].iloc[0]
    curve = measured[measured["op"] == op].groupby("bytes")["busbw_gbps"].median()
    busbw, plateau = float(at_gradient["busbw_gbps"].median()), float(curve.max())
    share = busbw / plateau if plateau > 0 else math.nan
    return {
        "op": op,
        "bytes": int(at_gradient["bytes"].median()),
        "busbw_gbps": busbw,
        "plateau_gbps": plateau,
        "plateau_bytes": int(curve.idxmax()),
        "share": number(share),
        "bound": "latency" if share < LATENCY_BOUND_SHARE else "bandwidth",
    }


def width_crossover(runs: pd.DataFrame, table: pd.DataFrame, framework: str, backend: str, gpus: int) -> dict | None:
    """Where the model width ran (several widths of this backend at this count): the smallest width
    whose exposed communication exceeds its compute growth; None without a width axis."""
    widths = usable(runs)
    widths = widths[
        (widths["source"] == OWN_SOURCE) & (widths["framework"] == framework) & (widths["backend"] == backend)
    ]
    by_variant = widths.groupby("variant")["model_width"].first().dropna()
    if by_variant.nunique() < 2:
        return None
    rows = table[
        (table["source"] == OWN_SOURCE)
        & (table["framework"] == framework)
        & (table["backend"] == backend)
        & (table["gpus"] == gpus)
        & table["variant"].isin(by_variant.index)
    ]
    compared = []
    for variant, terms in rows.groupby("variant"):
        values = terms.set_index("term")["seconds"]
        if pd.notna(values.get("exposed_comm")) and pd.notna(values.get("compute_growth")):
            compared.append((int(by_variant[variant]), float(values["exposed_comm"]), float(values["compute_growth"])))
    if not compared:
        return {"widths": sorted(int(w) for w in set(by_variant)), "reason": "no width has a waterfall at this count"}
    compared.sort()
    crossing = next((width for width, comm, growth in compared if comm > growth), None)
    return {"widths": [width for width, _, _ in compared], "crossover_width": crossing}


TERM_WORDS = {
    "compute_growth": "compute growth",
    "imbalance": "imbalance between the ranks (stragglers)",
    "exposed_comm": "exposed communication",
    "data_wait": "waiting for data",
    "rest": "the rest of the epoch",
}


def gpus_text(count: int) -> str:
    """'1 GPU', '8 GPUs'."""
    return f"{count} GPU{'s' if count != 1 else ''}"


def interval_text(low: float | None, high: float | None) -> str:
    return f", 95% interval {low:.2f}-{high:.2f}" if low is not None and high is not None else ""


def sentences(fact: dict) -> list[str]:
    """The framework's facts in words (only what `fact` holds)."""
    said = [lead_sentence(fact)]
    said += [comparison_sentence(found, fact["best"]["backend"]) for found in fact["comparisons"]]
    return said + loss_sentences(fact) + reduction_sentences(fact) + width_sentences(fact)


def lead_sentence(fact: dict) -> str:
    """The fastest series at the framework's GPU count, with its parallel efficiency where known."""
    framework, gpus, best = fact["framework"], fact["gpus"], fact["best"]
    seeds = f"{best['seeds']} seed{'s' if best['seeds'] != 1 else ''}"
    fastest = f"{framework} at {gpus_text(gpus)}: {series_name(best['backend'], best['variant'])} is the fastest"
    speed = f"({best['images_per_s']:.3g} images/s, {seeds})"
    if fact["base_gpus"] is None or fact["base_gpus"] == gpus:
        return f"{fastest} {speed}; no smaller GPU count to scale from."
    if best["efficiency"] is None:
        return f"{fastest} {speed}."
    interval = interval_text(best["efficiency_low"], best["efficiency_high"])
    return (
        f"{fastest}, at a parallel efficiency of {best['efficiency']:.2f}{interval} "
        f"against {gpus_text(fact['base_gpus'])} ({seeds})."
    )


def loss_sentences(fact: dict) -> list[str]:
    """What scaling costs the epoch and its largest term, or why that is unknown."""
    gpus, loss = fact["gpus"], fact["loss"]
    said = []
    if "term" in loss:
        measured, ideal = loss["measured_s"], loss["ideal_s"]
        if measured > ideal:
            said.append(
                f"It loses {measured - ideal:.3g} s of each {gpus}-GPU epoch to scaling ({measured:.3g} s, ideal {ideal:.3g} s)."
            )
        else:
            said.append(f"Its {gpus}-GPU epoch ({measured:.3g} s) is at or below the ideal ({ideal:.3g} s).")
        if loss["seconds"] > 0:
            said.append(
                f"Its largest term: {TERM_WORDS[loss['term']]} costs {100 * loss['share']:.0f}% of the {gpus}-GPU epoch "
                f"({loss['seconds']:.3g} s)."
            )
        else:
            said.append("No term of its waterfall grew above the base's.")
    elif fact["base_gpus"] is not None and fact["base_gpus"] != gpus:
        said.append(f"Where its time went is unknown: {loss['reason']}.")
    return said


def reduction_sentences(fact: dict) -> list[str]:
    """How fast the gradient's reduction runs against its plateau, or why it was not measured."""
    gpus, reduced = fact["gpus"], fact["reduction"]
    if "bound" in reduced:
        return [
            f"Its gradient {reduced['op'].replace('_', '-')} of {reduced['bytes'] / 1e6:.3g} MB runs at "
            f"{reduced['busbw_gbps']:.3g} GB/s bus bandwidth, {100 * reduced['share']:.0f}% of the "
            f"{reduced['plateau_gbps']:.3g} GB/s it reaches at {reduced['plateau_bytes'] / 1e6:.3g} MB: "
            f"{reduced['bound']}-bound."
        ]
    if gpus > 1:
        return [f"Its collectives were not measured at {gpus} GPUs: {reduced['reason']}."]
    return []


def width_sentences(fact: dict) -> list[str]:
    """Where exposed communication first outgrows compute as the model widens, where widths were swept."""
    width = fact["width"]
    if width is None or "crossover_width" not in width:
        return []
    if width["crossover_width"] is None:
        widest = max(width["widths"])
        return [f"Exposed communication stays below compute growth at every width up to {widest}."]
    return [
        f"Exposed communication first exceeds compute growth at model width {width['crossover_width']} "
        f"(widths {', '.join(map(str, width['widths']))} at {fact['gpus']} GPUs)."
    ]


def framework_fact(
    framework: str,
    cells: pd.DataFrame,
    runs: pd.DataFrame,
    scaling: pd.DataFrame,
    table: pd.DataFrame,
    verdicts: pd.DataFrame,
    collectives: pd.DataFrame,
    rested_on: pd.DataFrame,
) -> dict:
    gpus = int(cells["gpus"].max())
    best = best_series(cells[cells["gpus"] == gpus])
    backend, variant = best["backend"], best["variant"]
    row = scaling_row(scaling, framework, backend, variant, gpus)
    base = int(row["base_gpus"]) if row is not None and pd.notna(row["base_gpus"]) else None
    fact = {
        "framework": framework,
        "gpus": gpus,
        "base_gpus": base,
        "best": {
            "backend": backend,
            "variant": variant,
            "images_per_s": float(best["images_per_s"]),
            "seeds": int(best["seeds"]),
            "efficiency": number(row["efficiency_epoch_time"]) if row is not None and base != gpus else None,
            "efficiency_low": number(row["efficiency_epoch_time_lo"]) if row is not None else None,
            "efficiency_high": number(row["efficiency_epoch_time_hi"]) if row is not None else None,
        },
        "versus": runner_up(verdicts, framework, backend, variant, gpus),
        "comparisons": [
            comparison(row)
            for _, row in rested_on.iterrows()
            if row["compared"] == "backends" and row["framework"] == framework and row["gpus"] == gpus
        ],
        "loss": largest_loss(table, framework, backend, variant, gpus),
        "reduction": reduction(collectives, framework, backend, variant, gpus),
        "width": width_crossover(runs, table, framework, backend, gpus),
    }
    fact["sentences"] = sentences(fact)
    return fact


def answer(
    runs: pd.DataFrame,
    scaling: pd.DataFrame,
    table: pd.DataFrame,
    verdicts: pd.DataFrame,
    collectives: pd.DataFrame,
    rounds: list[Round] | None = None,
    rules: Rules | None = None,
) -> dict:
    """answer.json (module docstring); `rounds`, `rules`: matrix.seeds {initial, max} (rounds.replay)."""
    own = runs[runs["source"] == OWN_SOURCE]
    good = usable(own)
    good = good[good["images_per_s"].notna() & (good["images_per_s"] > 0)]
    rested_on = answer_rows(verdicts, runs)
    facts = [
        framework_fact(framework, cells, runs, scaling, table, verdicts, collectives, rested_on)
        for framework, cells in good.groupby("framework", sort=True)
    ]
    across = [comparison(row) for _, row in rested_on.iterrows() if row["compared"] == "frameworks"]
    notes = []
    if own.empty:
        notes.append("The study has no cells of its own.")
    elif good.empty:
        notes.append(f"None of the study's {len(own)} cells finished with status ok: nothing to answer yet.")
    else:
        missing = len(own) - len(good)
        if missing:
            notes.append(f"{missing} of {len(own)} cells did not finish with status ok and are not in the answer.")
        if int(good.groupby(["framework", "backend", "variant", "gpus"]).size().max()) < 2:
            notes.append(
                "One seed per cell: no difference between backends can be told from the noise between seeds "
                "(matrix.seeds)."
            )
    notes += imported_notes(runs)
    spent = rounds_fact(runs, rounds, rules) if rounds and rules else None
    if spent is not None:
        notes.append(spent["sentence"])
    return {
        "frameworks": facts,
        "frameworks_compared": across,
        "frameworks_sentences": [frameworks_sentence(found) for found in across],
        "rounds": spent,
        "notes": notes,
        "gate": GATE,
    }


def rounds_fact(runs: pd.DataFrame, rounds: list[Round], rules: Rules) -> dict:
    """What the rounds of matrix.seeds {initial, max} added and cost (rounds.csv's rows), in a sentence:
    GPU-hours as runs.csv has them, the cells without a record (a failed job) counted apart."""
    rows = round_table(rounds, runs)
    own = runs[runs["source"] == OWN_SOURCE]
    first = own[own["seed"] <= rules.initial]
    added = pd.Series([found_row(runs, key).get("gpu_hours") for found in rounds for key in found.adds], dtype=float)
    hours = {"first": float(first["gpu_hours"].sum(min_count=1)), "added": float(added.sum(min_count=1))}
    unknown, count = int(added.isna().sum()), len(added)

    def cost(value: float, missing: int = 0) -> str:
        said = f"{value:.3g} GPU-hours" if math.isfinite(value) else "GPU-hours not known"
        return said + (f", {missing} without a record" if missing else "")

    sentence = (
        f"Seeds until sure (matrix.seeds initial {rules.initial}, max {rules.max}): the first seeds' "
        f"{len(first)} cells took {cost(hours['first'])}; {len(rounds)} round{'s' if len(rounds) != 1 else ''} "
        f"added {count} cell{'s' if count != 1 else ''} ({cost(hours['added'] if count else 0.0, unknown)}); "
        f"{rounds[-1].stopped}."
    )
    return {
        "initial": rules.initial,
        "max": rules.max,
        "equivalence": rules.equivalence,
        "first_cells": len(first),
        "first_gpu_hours": number(hours["first"]),
        "added_cells": count,
        "added_gpu_hours": number(hours["added"]) if count else 0.0,
        "added_without_record": unknown,
        "rounds": json.loads(rows.to_json(orient="records")),
        "stopped": rounds[-1].stopped,
        "sentence": sentence,
    }


def imported_notes(runs: pd.DataFrame) -> list[str]:
    """What an imported study's logs can be compared on, said once per study."""
    notes = []
    for source in sorted(set(runs["source"]) - {OWN_SOURCE}):
        notes.append(
            f"Imported study {source}: its logs record no images per second, so its backends are compared on "
            "their steady epoch time (every epoch the same work); its time to target is its training time where "
            "its one IOU, evaluated after training, reached the target (verdicts.csv, source "
            f"{source})."
        )
    return notes
