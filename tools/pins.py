"""Print the pinned pip requirements of the conda environment files in envs/.

install.sh reads the pins from here so that conda and venv users get the same
versions from one source. Only the standard library is used: this runs before
the virtual environment exists.

    python3 tools/pins.py envs/train.yaml envs/pipeline.yaml [--exclude horovod]
    python3 tools/pins.py envs/train.yaml --only horovod   # prints the version
"""

import argparse
import re
import sys

PIN = re.compile(r"^\s+-\s+([A-Za-z0-9_.\-\[\]]+)==([A-Za-z0-9_.+\-]+)\s*(#.*)?$")


def read_pins(path: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    in_pip = False
    with open(path) as handle:
        for line in handle:
            if re.match(r"^\s+-\s+pip:\s*$", line):
                in_pip = True
                continue
            if in_pip:
                match = PIN.match(line)
                if match:
                    pins[match.group(1).lower().replace("_", "-")] = match.group(2)
                elif line.strip() and not line.strip().startswith("#"):
                    in_pip = False
    return pins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--only")
    args = parser.parse_args()
    merged: dict[str, str] = {}
    for path in args.files:
        for name, version in read_pins(path).items():
            if merged.get(name, version) != version:
                sys.exit(f"{path}: {name}=={version} conflicts with {name}=={merged[name]}")
            merged[name] = version
    if args.only:
        print(merged[args.only])
        return 0
    for name, version in sorted(merged.items()):
        if name not in args.exclude:
            print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
