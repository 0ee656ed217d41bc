"""What the host comparison and the drift say, as sentences for the report's landing page (and
answer.json), with the command that reruns a slow node's cells without it. A pure function of
hosts.csv, drift.csv and order.csv (analysis/hosts.py, analysis/drift.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from scalebench.analysis.hosts import MIN_CELLS, ONE_HOST


@dataclass(frozen=True)
class HostFindings:
    sentences: list[str]
    slow_nodes: list[str] = field(default_factory=list)
    rerun: str | None = None  # reruns the slow nodes' cells on other nodes (cluster.exclude), as printed


def host_findings(hosts: pd.DataFrame, drift: pd.DataFrame, order: pd.DataFrame | None = None) -> HostFindings:
    """Sentences on slow nodes and drift (tables as their CSVs hold them: hosts.csv, drift.csv, order.csv)."""
    sentences = host_sentences(hosts)
    slow = hosts[hosts["slow_node"].astype(bool)] if len(hosts) else hosts
    sentences += drift_sentences(drift)
    if order is not None:
        unsplit = order["host_analysis"].fillna("").str.startswith("no per-rank rows").sum()
        if unsplit:
            sentences.append(
                f"{unsplit} cell{'s have' if unsplit > 1 else ' has'} no per-rank rows and {'are' if unsplit > 1 else 'is'} "
                "left out of the host comparison (recorded before the step split, or with training.step_split off)."
            )
    command = next((text for text in slow.get("rerun", pd.Series(dtype=object)) if isinstance(text, str)), None)
    return HostFindings(sentences, sorted(set(slow["host"])) if len(slow) else [], command)


def host_sentences(hosts: pd.DataFrame) -> list[str]:
    if hosts.empty:
        return ["No cell with status ok has per-rank rows on several hosts: no host to compare."]
    if (hosts["verdict"] == ONE_HOST).any():
        return [f"One host ({hosts['host'].iloc[0]}) ran every rank: no other host to compare it with."]
    slow = hosts[hosts["slow_node"].astype(bool)]
    if len(slow):
        sentences = []
        for host, rows in slow.groupby("host", sort=True):
            parts = "; ".join(f"{row['measure']} {row['verdict']}" for _, row in rows.iterrows())
            sentences.append(
                f"Host {host} is slower than the others, against the other hosts' ranks of the same cells and "
                f"epochs: {parts}."
            )
        sentences.append("The command below reruns the cells they ran, on other nodes (cluster.exclude).")
        return sentences
    compared = hosts[hosts["cells"].fillna(0) >= MIN_CELLS]
    if compared.empty:
        most = int(hosts["cells"].fillna(0).max())
        return [f"Too few cells shared hosts to compare them (at most {most} per host; {MIN_CELLS} needed)."]
    sentences = [
        f"No host is slower than the others beyond its interval ({compared['host'].nunique()} hosts compared, "
        f"up to {int(compared['cells'].max())} cells each)."
    ]
    waits = compared[(compared["measure"] == "exposed communication") & compared["verdict"].str.startswith("longer")]
    for _, row in waits.iterrows():
        sentences.append(f"Host {row['host']}'s exposed communication is {row['verdict']}: look at its link.")
    return sentences


def drift_sentences(drift: pd.DataFrame) -> list[str]:
    drifted = drift[drift["verdict"].str.startswith("later cells")]
    if len(drifted):
        return [f"Drift: {row['measure']}: {row['verdict']}." for _, row in drifted.iterrows()]
    epoch = drift.loc[drift["measure"] == "epoch", "verdict"]
    quiet = "no drift the cells can show "
    if len(epoch) and epoch.iloc[0].startswith(quiet):
        return [f"No drift the cells can show: epoch time {epoch.iloc[0].removeprefix(quiet)}."]
    return []
