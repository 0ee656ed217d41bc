"""The order a study's cells are submitted in: drawn at random from `order.seed`, optionally in blocks.

A study run backend by backend, or GPU count by GPU count, turns a slow afternoon or a node that
is slow for a day into a false difference between backends. Drawing the order at random spreads
such effects over every kind of cell (docs/fairness.md#run-order).

Each cell's place comes from a hash of the seed and the cell's path, not from shuffling a list: the
same seed gives the same order on every Python, and adding cells (another seed, another GPU count)
keeps the order of the others among themselves. With `order.blocks`, block k holds the cells of
the k-th seed of matrix.seeds; blocks run one after another, each in its own random order.

The rules read it twice, through the plan (config/plan.py): a train job's Snakemake priority (the
first in the order the highest: Snakemake starts the ready jobs of the highest priority first
whenever not all can start) and, with blocks, the previous block's cells as the job's inputs. On
SLURM the plugin submits each round's jobs in the order of their priority (config/slurm_plugin.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from scalebench.cell import Cell


def _draw(seed: int, cell: Cell) -> str:
    return hashlib.sha256(f"{seed}/{cell.path}".encode()).hexdigest()


def block_of(seed: int, seeds: list[int]) -> int:
    """A cell's block (1-based): the place of its seed in matrix.seeds (0 for a seed outside it)."""
    return seeds.index(seed) + 1 if seed in seeds else 0


def run_order(cells: Iterable[Cell], order: dict, seeds: list[int]) -> list[Cell]:
    """The cells in the order they are to start (`order`: the config's order section; `seeds`:
    matrix.seeds). Without a seed: as given (Snakemake's scheduler then picks among them)."""
    cells = list(cells)
    if order["seed"] is None:
        return cells
    blocks = order["blocks"]
    return sorted(cells, key=lambda cell: (block_of(cell.seed, seeds) if blocks else 0, _draw(order["seed"], cell)))


def priorities(ordered: list[Cell]) -> dict[Cell, int]:
    """Each cell's Snakemake priority: the first to start the highest (a cell outside it: 0)."""
    return {cell: len(ordered) - place for place, cell in enumerate(ordered)}


def study_priorities(cells: Iterable[Cell], order: dict, seeds: list[int]) -> dict[Cell, int]:
    """The train jobs' priorities of a study: none without order.seed (Snakemake's own order)."""
    if order["seed"] is None:
        return {}
    return priorities(run_order(cells, order, seeds))


def previous_block(cell: Cell, cells: Iterable[Cell], seeds: list[int]) -> list[Cell]:
    """The cells that must finish before `cell` starts, in blocks: those of the block before its own."""
    block = block_of(cell.seed, seeds)
    if block <= 1:
        return []
    return [other for other in cells if block_of(other.seed, seeds) == block - 1]
