"""Print the pinned pip requirements of the conda environment files in envs/, for one Python.

install.sh reads the pins from here so that conda and venv users get the same versions from one
source. The files' `python>=3.11,<3.14` line is the range of supported Pythons (the same in every
file); a pin that must differ between them carries a python_version marker, and these markers are
the one place that says so:

    - scipy==1.17.1; python_version < "3.12"
    - scipy==1.18.0; python_version >= "3.12"

Only the standard library is used: this runs before the virtual environment exists.

    python3 tools/pins.py envs/*.yaml [--exclude horovod] [--python 3.12]  # the pins for 3.12 (default: this Python)
    python3 tools/pins.py envs/train.yaml --only horovod                   # its version
    python3 tools/pins.py envs/*.yaml --pythons                            # the supported versions: 3.11 3.12 3.13
"""

from __future__ import annotations

import argparse
import operator
import re
import sys
from dataclasses import dataclass

PIN = re.compile(
    r"^\s+-\s+(?P<name>[A-Za-z0-9_.\-\[\]]+)==(?P<version>[A-Za-z0-9_.+\-]+)"
    r"\s*(?:;\s*(?P<marker>[^#]*?))?\s*(#.*)?$"
)
MARKER = re.compile(r'^python_version\s*(?P<op><=|>=|==|!=|<|>)\s*["\'](?P<version>3\.\d+)["\']$')
OPERATORS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
PYTHON = re.compile(r"^\s+-\s+python>=(?P<lowest>3\.\d+),<(?P<beyond>3\.\d+)\s*(#.*)?$")


class PinError(ValueError):
    """A pin or Python range that this script cannot read, or pins that contradict each other."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    marker: str = ""  # a python_version marker, or "" for every Python

    def applies(self, python: str) -> bool:
        if not self.marker:
            return True
        found = MARKER.match(self.marker)
        assert found, self.marker  # read_pins accepts no other marker
        return OPERATORS[found["op"]](minor(python), minor(found["version"]))


def minor(version: str) -> tuple[int, int]:
    """'3.12' -> (3, 12)."""
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def read_pins(path: str) -> list[Pin]:
    """The pins of the file's pip section; a marker other than python_version is refused by its line
    (it would need pip's evaluation, and nothing here differs by anything but the Python)."""
    pins: list[Pin] = []
    in_pip = False
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if re.match(r"^\s+-\s+pip:\s*$", line):
                in_pip = True
                continue
            if in_pip:
                match = PIN.match(line)
                if match:
                    marker = " ".join((match["marker"] or "").split())
                    if marker and not MARKER.match(marker):
                        raise PinError(
                            f"{path}:{number}: marker {marker!r}: only python_version markers "
                            '(python_version >= "3.12") are read here'
                        )
                    pins.append(Pin(match["name"].lower().replace("_", "-"), match["version"], marker))
                elif line.strip() and not line.strip().startswith("#"):
                    in_pip = False
    return pins


def python_range(path: str) -> tuple[str, str]:
    """The file's supported Pythons as (lowest, first unsupported): `python>=3.11,<3.14` -> ('3.11', '3.14')."""
    with open(path) as handle:
        for line in handle:
            match = PYTHON.match(line)
            if match:
                return match["lowest"], match["beyond"]
    raise PinError(f"{path}: no `- python>=3.X,<3.Y` line (the supported Pythons)")


def supported_pythons(paths: list[str]) -> list[str]:
    """Every supported Python of the files, which must agree: ['3.11', '3.12', '3.13']."""
    ranges = {path: python_range(path) for path in paths}
    if len(set(ranges.values())) > 1:
        raise PinError(f"the files name different Pythons: {ranges}")
    lowest, beyond = next(iter(ranges.values()))
    (major, first), (_, last) = minor(lowest), minor(beyond)
    return [f"{major}.{each}" for each in range(first, last)]


def pins_for(paths: list[str], python: str) -> dict[str, str]:
    """Each package's version for `python` ('3.12'), over all the files; two pins of one package that
    both apply to it are refused (the files would disagree on what gets installed)."""
    merged: dict[str, str] = {}
    origin: dict[str, str] = {}
    for path in paths:
        for pin in read_pins(path):
            if not pin.applies(python):
                continue
            if merged.get(pin.name, pin.version) != pin.version:
                raise PinError(
                    f"{path}: {pin.name}=={pin.version} conflicts with {pin.name}=={merged[pin.name]} "
                    f"({origin[pin.name]}) for Python {python}"
                )
            merged[pin.name], origin[pin.name] = pin.version, path
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--only")
    parser.add_argument("--python", default="{}.{}".format(*sys.version_info[:2]))
    parser.add_argument("--pythons", action="store_true", help="print the supported Pythons")
    args = parser.parse_args()
    try:
        if args.pythons:
            print(" ".join(supported_pythons(args.files)))
            return 0
        pins = pins_for(args.files, args.python)
    except PinError as error:
        sys.exit(f"pins.py: {error}")
    if args.only:
        print(pins[args.only])
        return 0
    for name, version in sorted(pins.items()):
        if name not in args.exclude:
            print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
