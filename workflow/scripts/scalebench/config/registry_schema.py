"""What the schema says about each backend, filled in from the registry (scalebench/backends.py)
when the schema is loaded: matrix.backends's enum and what each backend is (its description's
last sentence), and one launch template per executor and framework_backend pair
(launchers.<executor>.<framework>_<name>), with its description.

config/schema.yaml leaves these out, so that a new registry entry is in the schema, validation,
the configuration reference and the launcher without another edit.
"""

from __future__ import annotations

from scalebench import backends


def fill(schema: dict) -> dict:
    """`schema` with the registry's backends in it (changed in place, and returned)."""
    properties = schema["properties"]
    listed = properties["matrix"]["properties"]["backends"]
    listed["items"] = {"enum": list(backends.names())}
    said = "; ".join(f"{name}: {what}" for name, what in backends.about().items())
    listed["description"] = f"{listed['description'].strip()} The backends: {said}."
    launchers = backends.default_launchers()
    for executor, section in properties["launchers"]["properties"].items():
        section["properties"] = {
            pair: {
                "description": backends.launch_note(executor, *pair.split("_", 1)),
                "type": "string",
                "default": template,
            }
            for pair, template in launchers[executor].items()
        }
    return schema
