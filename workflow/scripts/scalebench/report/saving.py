"""Saving a figure of the report: a plotnine ggplot or a matplotlib Figure (the picture panel). No
plotting library is imported here, so the picture panel's rule saves without importing plotnine."""

from __future__ import annotations

import warnings
from pathlib import Path


def save_figure(figure, path: str | Path, dpi: int = 120) -> None:
    """Save a plotnine figure (plotnine's notes about dropped NaN rows are expected here) or a
    matplotlib one (the picture panel)."""
    if hasattr(figure, "savefig"):
        figure.savefig(path, dpi=dpi)
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(Removed|removed).*")
        warnings.filterwarnings("ignore", message=".*only one observation.*")  # a single GPU count
        figure.save(path, dpi=dpi, verbose=False)
