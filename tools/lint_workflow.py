#!/usr/bin/env python3
"""`snakemake --lint`, less the one lint the train rules carry on purpose.

The train rules declare no `conda:` environment: theirs cannot be created by conda alone (Horovod
must be built from source with tools/horovod_fixes.py, which no conda or pip step applies), so
they run the interpreter ./install.sh prepared. Snakemake lints every rule without a conda
environment or container; this accepts exactly that lint on exactly those rules and fails on any
other, printing Snakemake's own text.
"""

from __future__ import annotations

import re
import subprocess
import sys

ACCEPTED_RULES = {"train", "train_variant"}
ACCEPTED_LINT = "Specify a conda environment or container for each rule."


def unexpected_lints(text: str) -> list[str]:
    """The (rule, lint title) pairs of `snakemake --lint text` output that are not accepted."""
    found, rule = [], None
    for line in text.splitlines():
        header = re.match(r"Lints for (?:rule (\S+)|snakefile .*)", line)
        if header:
            rule = header.group(1)
            continue
        title = re.match(r"\s+\* (.+?):?$", line)
        if title and not (rule in ACCEPTED_RULES and title.group(1).rstrip(":") == ACCEPTED_LINT):
            found.append(f"{rule or 'snakefile'}: {title.group(1)}")
    return found


def main() -> int:
    result = subprocess.run(["snakemake", "--lint", "text", *sys.argv[1:]], capture_output=True, text=True)
    output = result.stdout + result.stderr
    unexpected = unexpected_lints(output)
    if unexpected or (result.returncode and "Lints for" not in output):
        print(output, file=sys.stderr)
        print(
            "lint_workflow: unexpected lints:\n  " + "\n  ".join(unexpected or ["(snakemake failed)"]), file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
