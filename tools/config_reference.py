"""Render the configuration reference (a Markdown table) from config/schema.yaml, as loaded
(with the backend registry's enum and launch templates filled in: config/registry_schema.py).

    python tools/config_reference.py            # print it
    python tools/config_reference.py --write    # update config/README.md between the markers

config/README.md is where the Snakemake workflow catalog looks for a workflow's
configuration; a unit test checks that it holds the current table, so the
reference can never drift from the schema.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from generated_text import write_between  # noqa: E402
from scalebench.config import load_schema  # noqa: E402

REFERENCE = ROOT / "config" / "README.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _type(schema: dict) -> str:
    if "oneOf" in schema:  # a key of several forms (matrix.seeds: a list or a mapping)
        return " or ".join(_type(form) for form in schema["oneOf"])
    if schema.get("type") == "object" and "properties" in schema:
        return "{" + ", ".join(schema["properties"]) + "}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array" and "items" in schema:
        return f"list of {_type(schema['items'])}"
    return kind


def rows(schema: dict, prefix: str = "") -> list[tuple[str, str, str, str]]:
    out = []
    for name, sub in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        if sub.get("type") == "object" and "properties" in sub:
            out.append((key, "section", "", " ".join(sub.get("description", "").split())))
            out.extend(rows(sub, key + "."))
        else:
            if "default" in sub:
                default = f"`{json.dumps(sub['default'])}`"
            else:  # a key without default is required where its section says so, else optional (unset)
                default = "required" if name in schema.get("required", []) else "unset"
            out.append((key, _type(sub), default, " ".join(sub.get("description", "").split())))
    return out


def table() -> str:
    schema = load_schema(ROOT / "config" / "schema.yaml")
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, kind, default, meaning in rows(schema):
        meaning = meaning.replace("|", "\\|")
        lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not args.write:
        print(table())
        return 0
    write_between(REFERENCE, START, END, table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
