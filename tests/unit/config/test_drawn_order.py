"""The order a study's cells are submitted in (config/run_order.py): drawn from order.seed,
the same for the same seed, in blocks of one seed when asked."""

from __future__ import annotations

from scalebench import config as sb_config
from scalebench.config import run_order


def cells(schema, **matrix):
    config = sb_config.validate({"matrix": {"gpus": [1, 2, 4], "seeds": [1, 2, 3], **matrix}}, schema)
    return sb_config.cells(config, None), config


def test_the_same_seed_draws_the_same_order_and_another_seed_another(schema):
    study, config = cells(schema)
    assert config["order"] == {"seed": 1, "blocks": False}  # the default: a fixed seed
    first = run_order.run_order(study, config["order"], [1, 2, 3])
    again = run_order.run_order(list(reversed(study)), {"seed": 1, "blocks": False}, [1, 2, 3])
    other = run_order.run_order(study, {"seed": 2, "blocks": False}, [1, 2, 3])
    assert first == again and sorted(first) == sorted(study)
    assert other != first
    # neither the matrix's order nor grouped by backend or GPU count
    assert first != study and [c.backend for c in first] != sorted(c.backend for c in first)
    assert [c.gpus for c in first] != sorted(c.gpus for c in first)


def test_cells_added_to_a_study_keep_the_order_of_the_others(schema):
    study, _ = cells(schema)
    more, _ = cells(schema, seeds=[1, 2, 3, 4], gpus=[1, 2, 4, 8])
    before = run_order.run_order(study, {"seed": 5, "blocks": False}, [1, 2, 3])
    after = run_order.run_order(more, {"seed": 5, "blocks": False}, [1, 2, 3, 4])
    assert [cell for cell in after if cell in study] == before


def test_without_a_seed_the_cells_keep_their_order_and_no_priority_decides(schema):
    study, _ = cells(schema)
    assert run_order.run_order(study, {"seed": None, "blocks": False}, [1, 2, 3]) == study
    assert run_order.study_priorities(study, {"seed": None, "blocks": True}, [1, 2, 3]) == {}


def test_blocks_run_one_seed_after_another_each_in_its_own_random_order(schema):
    study, _ = cells(schema)
    seeds = [3, 1, 2]  # matrix.seeds' order is the blocks' order
    ordered = run_order.run_order(study, {"seed": 1, "blocks": True}, seeds)
    assert [cell.seed for cell in ordered] == [3] * 12 + [1] * 12 + [2] * 12
    plain = run_order.run_order(study, {"seed": 1, "blocks": False}, seeds)
    assert [c for c in ordered if c.seed == 1] == [c for c in plain if c.seed == 1]  # the draw within a block
    priorities = run_order.priorities(ordered)
    assert sorted(priorities.values(), reverse=True) == [priorities[cell] for cell in ordered]
    assert min(priorities[c] for c in ordered if c.seed == 3) > max(priorities[c] for c in ordered if c.seed == 1)
    a_cell_of_block_2 = next(c for c in ordered if c.seed == 1)
    assert sorted(run_order.previous_block(a_cell_of_block_2, study, seeds)) == sorted(c for c in study if c.seed == 3)
    assert run_order.previous_block(ordered[0], study, seeds) == []
