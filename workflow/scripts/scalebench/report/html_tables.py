"""The summary CSVs as HTML pages for the Snakemake report, which shows HTML and
images inline but offers CSV files only as downloads."""

from __future__ import annotations

import html
import math

import pandas as pd

STYLE = """
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 12px; color: #1e293b; }
p.note { color: #475569; max-width: 60em; }
div.scroll { overflow-x: auto; }
table { border-collapse: collapse; }
th, td { border: 1px solid #cbd5e1; padding: 3px 6px; text-align: left; white-space: nowrap; }
th { background: #f1f5f9; position: sticky; top: 0; }
tr:nth-child(even) td { background: #f8fafc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.ok { color: #15803d; } td.bad { color: #b91c1c; font-weight: 600; }
code { font-size: 12px; }
"""


def _cell(column: str, value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "<td></td>"  # unknown stays empty, never 0
    if isinstance(value, float):
        return f'<td class="num">{value:.4g}</td>'
    if isinstance(value, int):
        return f'<td class="num">{value}</td>'
    text = html.escape(str(value))
    if column == "status":
        kind = {"ok": "ok", "left out": "plain"}.get(value, "bad")  # left out: by design, not a failure
        return f'<td class="{kind}">{text}</td>'
    if column == "rerun" and text:
        return f"<td><code>{text}</code></td>"
    return f"<td>{text}</td>"


def table_html(frame: pd.DataFrame, title: str, note: str = "", empty: str = "Nothing to list.") -> str:
    """A standalone HTML page with `frame` as a table (unknown values empty)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "\n".join(
        "<tr>" + "".join(_cell(c, v) for c, v in zip(frame.columns, row)) + "</tr>"
        for row in frame.astype(object).itertuples(index=False)
    )
    body = (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table></div>'
        if len(frame)
        else f"<p>{html.escape(empty)}</p>"
    )
    note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h3>{html.escape(title)}</h3>{note_html}{body}</body></html>\n"
    )
