"""Which backends exist per framework, and the cells a matrix leaves out (and why) or refuses."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from conftest import REPO, tiny_config
from scalebench import backends
from scalebench import config as sb_config

EVERY_BACKEND = ["native", "horovod", "fsdp", "dp", "mirrored"]


def validated(schema, **sections) -> dict:
    sections.setdefault("dataset", {"synthetic": {"count": 400}})
    sections.setdefault("training", {"batch_per_gpu": 2})
    return sb_config.validate(tiny_config(**sections), schema)


def refusal(schema, **sections) -> str:
    with pytest.raises(sb_config.ConfigError) as error:
        validated(schema, **sections)
    return str(error.value)


def test_the_registry_names_each_backend_once_and_the_schema_lists_them(schema):
    names = {name for framework in backends.REGISTRY.values() for name in framework}
    assert names == set(backends.BACKENDS)
    assert backends.frameworks_of("fsdp") == ["torch"] and backends.frameworks_of("mirrored") == ["tensorflow"]
    assert backends.frameworks_of("horovod") == ["torch", "tensorflow"]
    # every pair has a launcher template per executor, one key per framework_backend as before
    launchers = backends.default_launchers()
    pairs = {f"{f}_{b}" for f, names in backends.REGISTRY.items() for b in names}
    assert set(launchers["local"]) == set(launchers["slurm"]) == pairs
    listed = schema["properties"]["launchers"]["properties"]
    assert {executor: set(listed[executor]["properties"]) for executor in launchers} == dict.fromkeys(launchers, pairs)


def test_a_new_registry_entry_reaches_the_schema_legend_launchers_and_docs_with_no_other_change(monkeypatch):
    """Adding a backend is its module plus one entry: here an entry alone (a copy of DDP's under a
    new name), registered in this process, and everything that lists backends finds it."""
    sys.path.insert(0, str(REPO / "tools"))
    import backends_table
    import config_reference
    from scalebench.report import legend

    ring = dataclasses.replace(
        backends.NATIVE_TORCH, name="ring", summary="ring allreduce", label="Ring", colour="#123456"
    )
    monkeypatch.setitem(backends.REGISTRY["torch"], "ring", ring)
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    listed = schema["properties"]["matrix"]["properties"]["backends"]
    assert "ring" in listed["items"]["enum"] and "ring: PyTorch ring allreduce" in listed["description"]
    config = validated(schema, matrix={"frameworks": ["torch"], "backends": ["ring"], "gpus": [1, 2], "seeds": [1]})
    assert [(c.backend, c.gpus) for c in sb_config.cells(config)] == [("ring", 1), ("ring", 2)]
    launchers = config["launchers"]  # DDP's templates: it starts a process per GPU
    assert launchers["local"]["torch_ring"] == launchers["local"]["torch_native"]
    assert launchers["slurm"]["torch_ring"] == launchers["slurm"]["torch_native"]
    assert legend.backend_label("ring") == "Ring" and legend.backend_label_colours()["Ring"] == "#123456"
    assert "| PyTorch | `ring` | Ring | ring allreduce |" in backends.markdown_table()
    assert "| `ring` | PyTorch | PyTorch ring allreduce | each framework's own" in backends.guide_table()
    assert "`launchers.slurm.torch_ring`" in config_reference.table()
    assert '"ring": "PyTorch ring allreduce"' in backends_table.report_about()
    assert (
        backends.describe_registry()
        == "PyTorch: native, horovod, fsdp, dp, ring; TensorFlow: native, horovod, mirrored"
    )


def test_a_new_entry_s_limits_reach_the_user_guide_and_the_report_s_sentences(monkeypatch):
    sys.path.insert(0, str(REPO / "tools"))
    import backends_table

    pairs = dataclasses.replace(
        backends.NATIVE_TORCH, name="pairs", min_ranks=4, min_ranks_reason="pairs of pairs", one_process=True
    )
    monkeypatch.setitem(backends.REGISTRY["torch"], "pairs", pairs)
    assert "cells of fewer than 4 GPUs, left out: pairs of pairs; more GPUs than a node has" in backends.guide_table()
    text = " ".join(backends_table.report_left_out().split())
    assert "fsdp on fewer than 2 GPUs, pairs on fewer than 4 GPUs, dp, pairs and mirrored beyond one node," in text
    assert "(1, or 2 for fsdp, or 4 for pairs)." in text


def test_a_backend_name_has_one_legend_entry_in_every_framework(monkeypatch):
    other = dataclasses.replace(backends.HOROVOD, label="hvd")
    monkeypatch.setitem(backends.REGISTRY["tensorflow"], "horovod", other)
    with pytest.raises(ValueError, match="backend horovod has two legend entries"):
        backends.legend()


def test_the_docs_and_the_report_hold_the_registry_s_current_text():
    table = subprocess.run(
        [sys.executable, str(REPO / "tools" / "backends_table.py")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert table in (REPO / "docs" / "backends.md").read_text(), "run: python tools/backends_table.py --write"
    guide = (REPO / "docs" / "user-guide.md").read_text()
    assert backends.guide_table() in guide, "run: python tools/backends_table.py --write"
    sys.path.insert(0, str(REPO / "tools"))
    import backends_table

    about = backends_table.report_about()
    report = (REPO / "report" / "workflow.rst").read_text()
    assert about in report, "run: python tools/backends_table.py --write"
    assert backends_table.report_left_out() in report, "run: python tools/backends_table.py --write"
    assert all(f'"{name}":' in about for name in backends.BACKENDS)
    upstream = backends_table.upstream_paragraph()
    assert "Horovod has had no release since 0.28.1 (2023-06-12)" in " ".join(upstream.split())
    for page in (REPO / "README.md", REPO / "docs" / "user-guide.md"):
        assert upstream in page.read_text(), f"{page.name}: run python tools/backends_table.py --write"
    assert backends_table.jinja_dict("upstream", backends.upstream_status()) in report


def test_the_upstream_status_is_generated_from_the_entry_s_facts_and_names_the_release_we_build(monkeypatch):
    """One sentence per library, from its entry's facts: a new fact changes every page that says it,
    and the release it names is the one each framework's environment pins (tools/build_horovod.sh builds it)."""
    sys.path.insert(0, str(REPO / "tools"))
    from pins import pins_for, supported_pythons

    facts = backends.HOROVOD.upstream
    files = [[str(REPO / "envs" / f"{framework}.yaml")] for framework in ("torch", "tensorflow")]
    pinned = {pins_for(each, python)["horovod"] for each in files for python in supported_pythons(each)}
    assert pinned == {facts.last_release}
    later = dataclasses.replace(facts, last_release="0.29.0", released="2027-01-02")
    entry = dataclasses.replace(backends.HOROVOD, upstream=later)
    for framework in ("torch", "tensorflow"):
        monkeypatch.setitem(backends.REGISTRY[framework], "horovod", entry)
    said = backends.upstream_status()
    assert list(said) == ["horovod"]  # once, though two frameworks have it
    assert said["horovod"].startswith("Horovod has had no release since 0.29.0 (2027-01-02): ")
    assert "scalebench builds 0.29.0 with fixes of its own (tools/horovod_fixes.py)" in said["horovod"]


def test_both_frameworks_with_every_backend_run_each_backend_where_it_exists(schema):
    config = validated(
        schema,
        matrix={"frameworks": ["torch", "tensorflow"], "backends": EVERY_BACKEND, "gpus": [1, 2, 4], "seeds": [1]},
    )
    pairs = {(c.framework, c.backend) for c in sb_config.cells(config)}
    assert pairs == {
        ("torch", "native"),
        ("torch", "horovod"),
        ("torch", "fsdp"),
        ("torch", "dp"),
        ("tensorflow", "native"),
        ("tensorflow", "horovod"),
        ("tensorflow", "mirrored"),
    }
    assert sorted(c.gpus for c in sb_config.cells(config) if c.backend == "fsdp") == [2, 4]
    lines = [entry.describe() for entry in sb_config.left_out(config)]
    registry = f"(the backends: {backends.describe_registry()})"  # a new entry changes it, not this test
    assert lines == [
        "left out: torch/fsdp g1: fsdp needs at least 2 ranks (with one there is nothing to shard)",
        f"left out: torch/mirrored: mirrored is not a PyTorch backend {registry}",
        f"left out: tensorflow/fsdp: fsdp is not a TensorFlow backend {registry}",
        f"left out: tensorflow/dp: dp is not a TensorFlow backend {registry}",
    ]


def test_one_process_backends_are_left_out_beyond_one_node(schema):
    config = validated(
        schema,
        matrix={"frameworks": ["torch", "tensorflow"], "backends": ["native", "dp", "mirrored"], "gpus": [2, 4, 8]},
        cluster={"gpus_per_node": 4},
    )
    dp = [c.gpus for c in sb_config.cells(config) if c.backend == "dp"]
    native = [c.gpus for c in sb_config.cells(config) if c.backend == "native"]
    assert dp == [2, 4] and native == [2, 4, 8, 2, 4, 8]  # torch's, then TensorFlow's
    left = {entry.item: entry.reason for entry in sb_config.left_out(config)}
    assert left["torch/dp g8"] == (
        "dp drives the devices of one node from one process, and a node has 4 (cluster.gpus_per_node)"
    )
    assert left["tensorflow/mirrored g8"].startswith("mirrored drives the devices of one node from one process")


@pytest.mark.parametrize(
    ("sections", "why"),
    [
        ({"training": {"batch_per_gpu": 2, "device": "cpu"}}, "(training.device: cpu)"),
        ({"cluster": {"gpus_per_node": 0, "ranks_per_node": 4}}, "(cluster.gpus_per_node: 0, a CPU-only cluster)"),
    ],
)
def test_dp_beyond_one_device_is_left_out_where_the_config_says_there_is_no_gpu(schema, sections, why):
    config = validated(
        schema, matrix={"frameworks": ["torch"], "backends": ["dp", "native"], "gpus": [1, 2]}, **sections
    )
    assert [c.gpus for c in sb_config.cells(config) if c.backend == "dp"] == [1]
    [entry] = sb_config.left_out(config)
    assert entry.item == "torch/dp g2"
    assert entry.reason == f"dp splits a batch over GPUs only; on the CPU it has one device {why}"


def test_mirrored_on_a_cpu_cluster_runs_on_as_many_devices_as_a_node_has_ranks(schema):
    config = validated(
        schema,
        matrix={"frameworks": ["tensorflow"], "backends": ["mirrored"], "gpus": [1, 2, 4]},
        cluster={"gpus_per_node": 0, "ranks_per_node": 2},
    )
    assert [c.gpus for c in sb_config.cells(config)] == [1, 2]
    [entry] = sb_config.left_out(config)
    assert "(cluster.ranks_per_node, a CPU-only cluster)" in entry.reason


def test_a_backend_of_none_of_the_listed_frameworks_is_refused_naming_the_key(schema):
    message = refusal(schema, matrix={"frameworks": ["tensorflow"], "backends": ["native", "fsdp"]})
    assert "config key 'matrix.backends': fsdp exists for none of matrix.frameworks ['tensorflow']" in message
    assert "it is a PyTorch backend" in message


def test_a_backend_with_no_cell_it_can_run_is_refused(schema):
    message = refusal(schema, matrix={"frameworks": ["torch"], "backends": ["native", "fsdp"], "gpus": [1]})
    assert "config key 'matrix.backends': no cell of fsdp can run with matrix.gpus [1]" in message
    assert "fsdp needs at least 2 ranks" in message


def test_the_removed_tf_strategy_key_says_what_replaced_it(schema):
    message = refusal(schema, training={"tf_strategy": "mirrored"})
    assert "unknown config key 'training.tf_strategy'" in message
    assert "list mirrored in matrix.backends" in message


def test_uneven_placement_does_not_concern_cells_that_are_left_out(schema):
    # dp on 10 GPUs is left out (one node of 4), so 10 is no placement problem; native on 10 would be
    config = validated(schema, matrix={"backends": ["dp"], "gpus": [2, 10]}, cluster={"gpus_per_node": 4})
    assert [c.gpus for c in sb_config.cells(config)] == [2]
    assert "10 GPUs cannot be spread evenly" in refusal(
        schema, matrix={"backends": ["native"], "gpus": [2, 10]}, cluster={"gpus_per_node": 4}
    )
