"""Render the docs' tables of backends (docs/backends.md, the user guide's) and the report's
sentences about them from the registry (scalebench/backends.py).

    python tools/backends_table.py            # print the table
    python tools/backends_table.py --write    # update docs/backends.md, the user guide's table and report/workflow.rst
                                              # (what each backend is; the cells a matrix leaves out and the bases),
                                              # and where a backend's library stands upstream (README, guide, report)

A unit test checks that each holds the current text, so a new registry entry reaches the docs
and the report with this command and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from generated_text import write_between  # noqa: E402
from scalebench import backends  # noqa: E402
from scalebench.backends import about, guide_table, markdown_table, upstream_status  # noqa: E402

DOC = ROOT / "docs" / "backends.md"
START, END = "<!-- backends-table:start -->", "<!-- backends-table:end -->"
GUIDE = ROOT / "docs" / "user-guide.md"
GUIDE_START, GUIDE_END = "<!-- backends-guide:start -->", "<!-- backends-guide:end -->"
REPORT = ROOT / "report" / "workflow.rst"
ABOUT_START, ABOUT_END = "{# backends-about:start #}", "{# backends-about:end #}"
LEFT_OUT_START, LEFT_OUT_END = "{# backends-left-out:start #}", "{# backends-left-out:end #}"
README = ROOT / "README.md"
UPSTREAM_START, UPSTREAM_END = "<!-- backends-upstream:start -->", "<!-- backends-upstream:end -->"
REPORT_UPSTREAM_START, REPORT_UPSTREAM_END = "{# backends-upstream:start #}", "{# backends-upstream:end #}"


def jinja_dict(name: str, texts: dict[str, str]) -> str:
    """A Jinja dict for the report (its template reads only the config)."""
    entries = "".join(f"  {json.dumps(key)}: {json.dumps(text)},\n" for key, text in texts.items())
    return f"{{% set {name} = {{\n{entries}}} %}}"


def report_about() -> str:
    """The report's Jinja dict of what each backend is."""
    return jinja_dict("about", about())


def upstream_paragraph() -> str:
    """The README's and the user guide's sentences on where the backends' libraries stand upstream."""
    return "\n".join(textwrap.wrap(" ".join(upstream_status().values()), 100))


def joined(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def report_left_out() -> str:
    """The report's paragraph on the cells a matrix leaves out and each series' base GPU count, from
    the registry's facts (the smallest world, one process per node, devices without GPUs)."""
    entries = {name: entry for framework in backends.REGISTRY.values() for name, entry in framework.items()}
    smallest = {name: entry.min_ranks for name, entry in entries.items() if entry.min_ranks > 1}
    cases = ["a backend the framework does not have"]
    cases += [f"{name} on fewer than {ranks} GPUs" for name, ranks in smallest.items()]
    one_process = [name for name, entry in entries.items() if entry.one_process]
    if one_process:
        cases.append(f"{joined(one_process)} beyond one node")
    cases += [
        f"{name} on more than {entry.cpu_devices} CPU device{'s' if entry.cpu_devices != 1 else ''}"
        for name, entry in entries.items()
        if entry.cpu_devices is not None
    ]
    bases = "".join(f", or {ranks} for {name}" for name, ranks in smallest.items())
    text = (
        f"Each backend runs with the listed frameworks that have it; the cells the matrix leaves out "
        f"({', '.join(cases)}) are listed with the reason in the table *failed, missing and left-out cells*. "
        f"Speedups are relative to the smallest GPU count each framework and backend ran (1{bases})."
    )
    return "\n".join(textwrap.wrap(text, 100))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not args.write:
        print(markdown_table())
        return 0
    write_between(DOC, START, END, markdown_table(), newlines=True)
    write_between(GUIDE, GUIDE_START, GUIDE_END, guide_table(), newlines=True)
    write_between(REPORT, ABOUT_START, ABOUT_END, report_about(), newlines=False)
    write_between(REPORT, LEFT_OUT_START, LEFT_OUT_END, report_left_out(), newlines=False)
    write_between(REPORT, REPORT_UPSTREAM_START, REPORT_UPSTREAM_END, jinja_dict("upstream", upstream_status()), False)
    for path in (README, GUIDE):
        write_between(path, UPSTREAM_START, UPSTREAM_END, upstream_paragraph(), newlines=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
