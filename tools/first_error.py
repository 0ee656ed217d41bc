"""Print the first error of a build log with the lines that explain it.

A failed Horovod build ends with pip's and setup.py's Python tracebacks; the cause
(a CMake error, the compiler's first error) is far above them. build_horovod.sh
shows this excerpt. Only the standard library: it runs before any environment exists.

    python3 tools/first_error.py build.log [--lines 25]
"""

import argparse
import re
import sys

# CMake's errors, then a compiler's or linker's (file:line: error: / fatal error:), then make's.
ERROR = re.compile(r"CMake Error|(^|\s|:)(fatal )?error:|undefined reference to|\*\*\* \[.*\] Error \d")
# pip's own words that a build failed, which pip 23.1 and newer print above the build's output
PIP_WRAPPER = re.compile(r"^\s*error: subprocess-exited-with-error\s*$")


def first_error(lines: list[str], context: int) -> list[str]:
    """The first line that reports an error, the one before it and the `context` lines after it;
    the last `context` lines where none does."""
    for index, line in enumerate(lines):
        if ERROR.search(line) and not PIP_WRAPPER.match(line):
            return lines[max(index - 1, 0) : index + context]
    return lines[-context:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("log")
    parser.add_argument("--lines", type=int, default=25)
    args = parser.parse_args()
    with open(args.log, errors="replace") as handle:
        lines = handle.read().splitlines()
    print("\n".join(first_error(lines, args.lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
