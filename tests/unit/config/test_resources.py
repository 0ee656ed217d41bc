"""A cell's node layout and its Snakemake resources, one name list for the package and the rule."""

from __future__ import annotations

import pytest
from conftest import tiny_config
from scalebench import config as sb_config
from scalebench.cell import Cell
from scalebench.config import resources


@pytest.mark.parametrize(
    ("cluster", "gpus", "layout"),
    [
        ({"gpus_per_node": 4, "ranks_per_node": 1}, 1, [1]),
        ({"gpus_per_node": 4, "ranks_per_node": 1}, 8, [4, 4]),
        ({"gpus_per_node": 4, "ranks_per_node": 1}, 10, [4, 4, 2]),
        ({"gpus_per_node": 4, "ranks_per_node": 1}, 6, [3, 3]),
        ({"gpus_per_node": 0, "ranks_per_node": 2}, 3, [2, 1]),
    ],
)
def test_node_layout_uses_as_few_nodes_as_fit(cluster, gpus, layout):
    assert resources.node_layout(cluster, gpus) == layout


def test_job_resources_are_exactly_the_rules_names(schema):
    config = sb_config.validate(tiny_config(), schema)
    assert tuple(resources.job_resources(config, Cell("torch", "native", 2, 1))) == resources.RESOURCE_NAMES
