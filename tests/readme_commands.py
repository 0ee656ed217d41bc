"""The shell commands printed in the README and the docs, as the tests that run them read them.

The documents are the README (the front page), config/README.md and every page under docs/ but the
benchmarks' dated log: a command moved from one to another stays tested.

The rule: every line of a fenced code block marked bash, sh, shell or console is a
command line (a console block's `$ ` prompt is dropped, lines without it are output);
blank lines and `#` comment lines are skipped, a trailing `  # comment` is cut, and a
line is split into commands at `&&`. A command whose program is `snakemake` (as
`.venv/bin/snakemake` or `snakemake`, after any `NAME=value` environment words) is a Snakemake command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\w*)\s*$")


# The dated log of the benchmarks' figures keeps each command as it was printed on its day: a record,
# not a page a user runs commands from (docs/benchmarks.md prints the current ones)
RECORDS = ("benchmarks-log.md",)


def documents(repo: Path) -> list[Path]:
    """The Markdown files a user reads commands from: the front page, the configuration, docs/ (less RECORDS)."""
    pages = [path for path in sorted((repo / "docs").glob("*.md")) if path.name not in RECORDS]
    return [repo / "README.md", repo / "config" / "README.md", *pages]


def code_blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block."""
    blocks, language, lines = [], None, []
    for line in markdown.splitlines():
        fence = FENCE.match(line)
        if fence and language is None:
            language, lines = fence.group(1), []
        elif line.startswith("```") and language is not None:
            blocks.append((language, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def without_comment(line: str) -> str:
    """The line up to a `#` that starts a comment (after a space, outside quotes)."""
    for match in re.finditer(r"\s#", line):
        head = line[: match.start()]
        try:
            shlex.split(head)
        except ValueError:  # the # sits inside an open quote
            continue
        return head.rstrip()
    return line.rstrip()


def shell_commands(markdown: str) -> list[str]:
    """Every command of the document's shell code blocks, as printed (comments cut)."""
    commands = []
    for language, lines in code_blocks(markdown):
        if language not in SHELL_LANGUAGES:
            continue
        for line in lines:
            if language == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            text = without_comment(line).strip()
            if not text or text.startswith("#"):
                continue
            commands.extend(part.strip() for part in text.split(" && "))
    return commands


def is_snakemake(command: str) -> bool:
    """Its program is snakemake, after any `NAME=value` words that set its environment."""
    words = [word for word in command.split() if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", word)]
    return bool(words) and Path(words[0]).name == "snakemake"


def snakemake_commands(markdown: str) -> list[str]:
    return [command for command in shell_commands(markdown) if is_snakemake(command)]
