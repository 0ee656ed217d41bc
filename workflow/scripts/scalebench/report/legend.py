"""The backends' legend names and colours, from their registry entries (scalebench/backends.py);
native is DDP in PyTorch's panel and MultiWorkerMirroredStrategy in TensorFlow's. No plotting
library here: the picture panel (predictions.py, matplotlib alone) labels its rows with these without
importing plotnine, which style.py's figures need.
"""

from __future__ import annotations

from scalebench import backends


def backend_label(name: str) -> str:
    """The legend's name of backend `name` (the name itself for one the registry lacks)."""
    return backends.legend().get(name, (name, ""))[0]


def backend_label_colours() -> dict[str, str]:
    """Each registered backend's legend label and its colour."""
    return dict(backends.legend().values())
