"""The report's first page: the study's text (report/workflow.rst) with the answer in front
(analysis/answer.py), so a reader meets the conclusion before the figures.

Snakemake renders the page with Jinja2 and then docutils: the answer is generated text, so it is
written inside a raw block (a backend name can never open a Jinja tag), and every sentence is one
list item, which docutils reads without indentation rules that a sentence could break.
"""

from __future__ import annotations

# the line of report/workflow.rst that the answer replaces (a Jinja comment: without an answer yet
# the page renders as before)
MARKER = "{# the answer (results/summary/answer.json) goes here: report/landing.py #}"


def plain(sentence: str) -> str:
    """A generated sentence as reStructuredText text: its markup characters escaped."""
    for character in "\\*`|_":
        sentence = sentence.replace(character, "\\" + character)
    return sentence


def answer_text(facts: dict) -> str:
    """The answer as reStructuredText: a section with one list item per framework and per note."""
    lines = ["The answer", "----------", ""]
    for fact in facts["frameworks"]:
        lines += ["- " + plain(" ".join(fact["sentences"])), ""]
    for sentence in facts.get("frameworks_sentences", []):  # the frameworks on each backend
        lines += [f"- {plain(sentence)}", ""]
    for note in facts.get("notes", []):
        lines += [f"- {plain(note)}", ""]
    hosts = facts.get("hosts") or {}  # slow nodes and drift (analysis/host_findings.py)
    for sentence in hosts.get("sentences", []):
        lines += [f"- {plain(sentence)}", ""]
    if hosts.get("rerun"):  # a literal block: the command as printed, never markup
        lines += ["The command that reruns the slow nodes' cells on other nodes::", "", f"    {hosts['rerun']}", ""]
    lines += [
        "Why, figure by figure: *the loss waterfall* (what each GPU count cost, and to which cause) and the",
        "tables *waterfall* and *verdicts* (how sure). The same facts: ``results/summary/answer.json``.",
        "",
        "The study",
        "---------",
        "",
    ]
    return "\n".join(lines)


def landing_page(template: str, facts: dict) -> str:
    """`template` (report/workflow.rst) with the answer at its marker line."""
    if MARKER not in template:
        raise ValueError(f"the report's text has no line {MARKER!r} to put the answer at")
    return template.replace(MARKER, "{% raw %}\n" + answer_text(facts) + "{% endraw %}", 1)
