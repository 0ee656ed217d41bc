"""The sbatch line of each training cell, built by the SLURM plugin's own code.

The train rule's resources are evaluated by real Snakemake (the rule from the
Snakefile, its resource functions in rules/common.smk, attempt included), and
the sbatch command comes from snakemake-executor-plugin-slurm's
get_submit_command and set_gres_string: the same calls its run_job makes.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import REPO
from scalebench.cell import Cell
from scalebench.cluster import cell_holder
from scalebench.config import load_schema, plan
from scalebench.config.resources import RESOURCE_NAMES, declared_names
from snakemake.api import SnakemakeApi
from snakemake.rules import Rule
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string
from snakemake_executor_plugin_slurm.validation import validate_slurm_extra


def gpu_study(**cluster) -> dict:
    """A study on a GPU cluster with 4 GPUs per node; 20 epochs."""
    return {
        "dataset": {"source": "synthetic", "image_size": [32, 48], "synthetic": {"count": 200, "size": [48, 64]}},
        "matrix": {"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2, 4, 8, 16], "seeds": [1]},
        "training": {"epochs": 20, "batch_per_gpu": 4},
        "cluster": {
            "gpus_per_node": 4,
            "cpus_per_rank": 8,
            "mem_mb_per_rank": 32000,
            "gres": "gpu:a100:{n}",
            "partition": "gpu",
            "account": "proj42",
            "time": {"base_min": 10, "per_epoch_min": 2, "floor_min": 15, "retry_factor": 2},
            **cluster,
        },
    }


@contextmanager
def train_rule(tmp_path: Path, config: dict, resources: ResourceSettings | None = None) -> Iterator[Rule]:
    """The train rule of the Snakefile, loaded by real Snakemake with `config` (and the resource
    settings of the command line: --default-resources, --set-resources, --resources)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        workflow_api = api.workflow(
            resource_settings=resources or ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[config_file]),
            snakefile=REPO / "Snakefile",
            workdir=tmp_path,
        )
        yield workflow_api._workflow.get_rule("train")


def sbatch_lines(
    tmp_path: Path,
    config: dict,
    attempt: int = 1,
    framework: str = "torch",
    resources: ResourceSettings | None = None,
) -> dict[tuple[str, int], list[str]]:
    """{(backend, gpus): sbatch argv} for every cell of `config` of `framework`, seed 1."""
    lines = {}
    with train_rule(tmp_path, config, resources) as rule:
        for backend in config["matrix"]["backends"]:
            for gpus in config["matrix"]["gpus"]:
                wildcards = {"framework": framework, "backend": backend, "gpus": str(gpus), "seed": "1"}
                resources = rule.expand_resources(wildcards, [], attempt)
                job = SimpleNamespace(resources=resources, threads=resources["_cores"])
                validate_slurm_extra(job)
                params = {
                    "run_uuid": "uuid",
                    "slurm_logfile": tmp_path / "%j.log",
                    "comment_str": "rule_train",
                    # what the executor's get_account_arg/get_partition_arg yield for a valid account/partition
                    "account": f"-A {resources['slurm_account']}" if resources.get("slurm_account") else "",
                    "partition": f"-p {resources['slurm_partition']}" if resources.get("slurm_partition") else "",
                    "workdir": tmp_path,
                }
                call = get_submit_command(job, params) + set_gres_string(job)
                lines[(backend, gpus)] = shlex.split(call)
    return lines


def options(argv: list[str]) -> dict[str, str]:
    """--key=value and --key value / -k value pairs of an sbatch argv."""
    found: dict[str, str] = {}
    items = iter(argv[1:])
    for item in items:
        if item.startswith("--") and "=" in item:
            key, value = item.split("=", 1)
            found[key] = value
        elif item.startswith("-") and item not in ("--parsable", "--exclusive", "--export=ALL"):
            found[item] = next(items)
        else:
            found[item] = ""
    return found


def test_train_rule_takes_every_resource_from_the_package(tmp_path):
    with train_rule(tmp_path, gpu_study(qos="high", constraint="a100")) as rule:
        assert set(RESOURCE_NAMES) <= set(rule.resources)


def test_options_the_config_leaves_unset_are_not_declared(tmp_path):
    # a declared resource replaces --default-resources even when its function returns None
    with train_rule(tmp_path, gpu_study(account=None, partition=None)) as rule:
        assert not {"slurm_account", "slurm_partition", "qos", "constraint"} & set(rule.resources)
        assert set(declared_names(gpu_study(account=None, partition=None)["cluster"])) <= set(rule.resources)


def test_account_and_partition_of_the_command_line_reach_every_train_job(tmp_path):
    # snakemake --executor slurm --default-resources slurm_account=myaccount slurm_partition=long (README)
    defaults = ResourceSettings(default_resources={"slurm_account": "myaccount", "slurm_partition": "long"})
    study = gpu_study(account=None, partition=None)
    for argv in sbatch_lines(tmp_path / "defaults", study, resources=defaults).values():
        found = options(argv)
        assert (found["-A"], found["-p"]) == ("myaccount", "long")
    # --set-resources train:slurm_account=other wins over both
    chosen = ResourceSettings(
        default_resources={"slurm_account": "myaccount"},
        overwrite_resources={"train": {"slurm_account": "other", "qos": "high"}},
    )
    for argv in sbatch_lines(tmp_path / "set", study, resources=chosen).values():
        found = options(argv)
        assert (found["-A"], found["--qos"]) == ("other", "high") and "-p" not in found


def test_the_study_config_wins_over_the_default_resources(tmp_path):
    defaults = ResourceSettings(default_resources={"slurm_account": "myaccount", "slurm_partition": "long"})
    for argv in sbatch_lines(tmp_path, gpu_study(), resources=defaults).values():
        found = options(argv)
        assert (found["-A"], found["-p"]) == ("proj42", "gpu")


@pytest.fixture(scope="module")
def gpu_lines(tmp_path_factory):
    return sbatch_lines(tmp_path_factory.mktemp("gpu"), gpu_study())


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_node", "minutes"),
    [(1, 1, 1, 50), (2, 1, 2, 30), (4, 1, 4, 20), (8, 2, 4, 15), (16, 4, 4, 15)],
)
def test_gpu_cluster_sbatch_lines(gpu_lines, gpus, nodes, per_node, minutes):
    found = options(gpu_lines[("native", gpus)])
    assert found["--nodes"] == str(nodes)
    assert found["--ntasks-per-node"] == str(per_node)
    assert found["--gres"] == f"gpu:a100:{per_node}"
    assert found["--cpus-per-task"] == "8"
    assert found["--mem"] == str(32000 * per_node)
    assert found["-t"] == str(minutes)
    assert found["-p"] == "gpu" and found["-A"] == "proj42"
    # the plugin's pitfalls: no task count per GPU, no empty QoS or constraint
    assert not {"--ntasks-per-gpu", "--ntasks", "--qos", "-C"} & set(found)


def test_time_limit_grows_with_each_attempt(tmp_path):
    first = options(sbatch_lines(tmp_path / "a", gpu_study(), attempt=1)[("native", 2)])
    third = options(sbatch_lines(tmp_path / "b", gpu_study(), attempt=3)[("native", 2)])
    assert (int(first["-t"]), int(third["-t"])) == (30, 120)


def test_optional_options_appear_only_when_set(tmp_path):
    lines = sbatch_lines(
        tmp_path,
        gpu_study(qos="high", constraint="a100&ib", exclusive=True, extra="--signal=B:USR1@120", account=None),
    )
    found = options(lines[("native", 8)])
    assert found["--qos"] == "high" and found["-C"] == "a100&ib"
    assert "--exclusive" in found and found["--signal"] == "B:USR1@120"
    assert "-A" not in found


def test_cpu_only_cluster_maps_ranks_to_tasks_without_gres(tmp_path):
    config = gpu_study(gpus_per_node=0, ranks_per_node=2)
    lines = sbatch_lines(tmp_path, config)
    one, four = options(lines[("native", 1)]), options(lines[("native", 4)])
    assert not {"--gres", "--gpus"} & (set(one) | set(four))
    assert (one["--nodes"], one["--ntasks"], one["--ntasks-per-node"]) == ("1", "1", "1")
    assert (four["--nodes"], four["--ntasks-per-node"], four["--mem"]) == ("2", "2", "64000")
    assert "--ntasks" not in four


def test_one_rank_per_node_spans_nodes(tmp_path):
    config = gpu_study(gpus_per_node=0, ranks_per_node=1)
    config["matrix"]["gpus"] = [2]
    found = options(sbatch_lines(tmp_path, config)[("native", 2)])
    assert (found["--nodes"], found["--ntasks"], found["--ntasks-per-node"]) == ("2", "2", "1")


def test_uneven_cell_asks_for_the_largest_share_per_node(tmp_path):
    config = gpu_study(allow_uneven=True)
    config["matrix"]["gpus"] = [10]
    found = options(sbatch_lines(tmp_path, config)[("native", 10)])
    assert (found["--nodes"], found["--ntasks-per-node"], found["--gres"]) == ("3", "4", "gpu:a100:4")


@pytest.mark.parametrize(("framework", "backend"), [("torch", "dp"), ("tensorflow", "mirrored")])
def test_one_process_backends_ask_for_one_task_with_every_gpu_and_cpu_of_the_cell(tmp_path, framework, backend):
    config = gpu_study()
    config["matrix"].update(frameworks=[framework], backends=[backend], gpus=[1, 2, 4])
    lines = sbatch_lines(tmp_path, config, framework=framework)
    for gpus in (1, 2, 4):
        found = options(lines[(backend, gpus)])
        assert (found["--nodes"], found["--ntasks-per-node"]) == ("1", "1")
        assert found["--gres"] == f"gpu:a100:{gpus}"
        assert found["--cpus-per-task"] == str(8 * gpus) and found["--mem"] == str(32000 * gpus)
        assert not {"--ntasks-per-gpu", "--ntasks"} & set(found)


def test_one_process_backend_on_a_cpu_cluster_is_one_task_with_the_cpus_of_its_devices(tmp_path):
    config = gpu_study(gpus_per_node=0, ranks_per_node=2, cpus_per_rank=1, mem_mb_per_rank=1000)
    config["matrix"].update(frameworks=["tensorflow"], backends=["mirrored"], gpus=[2])
    found = options(sbatch_lines(tmp_path, config, framework="tensorflow")[("mirrored", 2)])
    assert (found["--nodes"], found["--ntasks"], found["--ntasks-per-node"]) == ("1", "1", "1")
    assert (found["--cpus-per-task"], found["--mem"]) == ("2", "2000") and "--gres" not in found


def test_fsdp_is_one_task_per_gpu_like_ddp(tmp_path):
    config = gpu_study()
    config["matrix"].update(backends=["fsdp", "native"], gpus=[2, 8])
    lines = sbatch_lines(tmp_path, config)
    assert options(lines[("fsdp", 8)]) == options(lines[("native", 8)])


def test_a_left_out_cell_named_as_a_target_is_refused_before_submission(tmp_path):
    config = gpu_study()
    config["matrix"].update(backends=["native", "dp"], gpus=[2, 8])
    with pytest.raises(Exception, match=r"torch/dp/g8/s1 cannot run: dp drives the devices of one node"):
        sbatch_lines(tmp_path, config)


def test_the_local_gpu_resource_leaves_the_sbatch_line_as_it_is(tmp_path, monkeypatch):
    # the plugin reads a resource named gpu as --gpus (and adds --ntasks-per-gpu): local_gpus is not read
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")  # 8 faked GPUs: the count declared below
    study = gpu_study()
    study["matrix"]["gpus"] = [1, 2, 4, 8]
    declared = ResourceSettings(resources={"local_gpus": 8})
    with train_rule(tmp_path / "rule", study, declared) as rule:
        wildcards = {"framework": "torch", "backend": "native", "gpus": "4", "seed": "1"}
        assert rule.expand_resources(wildcards, [], 1)["local_gpus"] == 4
    with_limit = sbatch_lines(tmp_path / "declared", study, resources=declared)
    without = sbatch_lines(tmp_path / "plain", study)
    for cell, argv in with_limit.items():  # the same words but the test's own folder
        assert [w.replace("/declared", "/plain") for w in argv] == without[cell]


def test_node_binding_is_the_default_and_its_sbatch_line_is_unchanged(tmp_path):
    explicit = sbatch_lines(tmp_path / "node", gpu_study(gpu_binding="node"))
    default = sbatch_lines(tmp_path / "default", gpu_study())
    for cell, argv in explicit.items():  # the same words but the test's own folder
        assert [w.replace("/node", "/default") for w in argv] == default[cell]
        assert not any(w.startswith("--gpus-per-task") for w in argv)


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_node"),
    [(1, 1, 1), (2, 1, 2), (4, 1, 4), (8, 2, 4), (16, 4, 4)],
)
def test_task_binding_asks_for_one_gpu_per_task_and_no_gres(tmp_path_factory, gpus, nodes, per_node):
    lines = sbatch_lines(tmp_path_factory.mktemp("task"), gpu_study(gpu_binding="task"))
    found = options(lines[("native", gpus)])
    assert found["--gpus-per-task"] == "1"
    assert (found["--nodes"], found["--ntasks-per-node"]) == (str(nodes), str(per_node))
    assert (found["--cpus-per-task"], found["--mem"]) == ("8", str(32000 * per_node))
    # no per-node GPU request beside the per-task one, and no task count per GPU
    assert not {"--gres", "--gpus", "--ntasks-per-gpu"} & set(found)
    # one rank per node: the plugin counts tasks itself (--ntasks), which must be the node count
    assert found.get("--ntasks", str(nodes)) == str(nodes) and ("--ntasks" in found) == (per_node == 1)


@pytest.mark.parametrize(("framework", "backend"), [("torch", "dp"), ("tensorflow", "mirrored")])
def test_task_binding_gives_a_one_process_backend_all_its_gpus_in_its_one_task(tmp_path, framework, backend):
    config = gpu_study(gpu_binding="task")
    config["matrix"].update(frameworks=[framework], backends=[backend], gpus=[1, 4])
    lines = sbatch_lines(tmp_path, config, framework=framework)
    for gpus in (1, 4):
        found = options(lines[(backend, gpus)])
        assert found["--gpus-per-task"] == str(gpus) and "--gres" not in found
        assert (found["--nodes"], found["--ntasks"], found["--ntasks-per-node"]) == ("1", "1", "1")
        assert found["--cpus-per-task"] == str(8 * gpus)


# --- the bill's limits and a held cell's waiting job (config/bill.py), read from the study's folder


def node_step_truth(gpus: int) -> float:
    """A weak-scaling epoch on nodes of 4 GPUs: compute 40 s over the ranks, per step latency 1 s,
    bandwidth 4 s and 3 s more once the ranks span nodes."""
    return (40.0 + (1.0 if gpus > 1 else 0.0) + 4.0 * (gpus - 1) / gpus + (3.0 if gpus > 4 else 0.0)) / gpus


def test_cells_measured_before_ask_for_their_prediction_with_its_margin_instead_of_the_formula(tmp_path):
    from test_bill import OVERHEAD_S, measure

    config = gpu_study(time={"base_min": 10, "per_epoch_min": 2, "floor_min": 1, "retry_factor": 2})
    config["matrix"]["seeds"] = [1, 2]
    studied = plan.Study.validate(config, load_schema(REPO / "config" / "schema.yaml"))
    for gpus in (1, 2, 4, 8, 16):  # seed 2 finished on every count, seed 1 still to run
        measure(
            studied,
            Cell("torch", "native", gpus, 2),
            node_step_truth(gpus),
            tmp_path / "results" / "runs",
            nodes=-(-gpus // 4),
        )
    formula = sbatch_lines(tmp_path / "fresh", config)
    measured = sbatch_lines(tmp_path, config)
    for gpus in (1, 2, 4, 8, 16):
        predicted_s = 20 * node_step_truth(gpus) + OVERHEAD_S  # 20 epochs: the scaling model fits the truth
        limit = options(measured[("native", gpus)])["-t"]
        assert int(limit) == math.ceil(10 + predicted_s * 1.5 / 60), gpus  # base_min + prediction x safety_factor
        assert limit != options(formula[("native", gpus)])["-t"]  # 50, 30, 20, 15 and 13 minutes
    # a retry still grows it
    third = options(sbatch_lines(tmp_path, config, attempt=3)[("native", 2)])["-t"]
    assert int(third) == math.ceil(math.ceil(10 + (20 * node_step_truth(2) + OVERHEAD_S) * 1.5 / 60) * 4)


def test_a_held_cells_job_asks_for_one_cpu_and_no_gpu_and_its_retry_for_the_whole_cell(tmp_path):
    config = gpu_study()
    folder = tmp_path / "results" / "runs" / "torch" / "native" / "g4" / "s1"
    folder.mkdir(parents=True)  # a job of an earlier Snakemake trains it: this process holds its lock
    run = {"framework": "torch", "backend": "native", "gpus": 4, "seed": 1, "status": "running"}
    (folder / "run.json").write_text(json.dumps(run))
    (folder / "metrics.jsonl").write_text("")
    (folder / cell_holder.FOLDER).mkdir()
    holder, lock = cell_holder.create(folder / cell_holder.FOLDER, 1, None)
    with lock:
        waiting = options(sbatch_lines(tmp_path, config)[("native", 4)])
        retry = options(sbatch_lines(tmp_path, config, attempt=2)[("native", 4)])
    full = options(sbatch_lines(tmp_path / "free", config)[("native", 4)])
    assert "--gres" not in waiting and not any("gpu" in option for option in waiting)
    assert (waiting["--nodes"], waiting["--ntasks"], waiting["--cpus-per-task"], waiting["--mem"]) == (
        "1",
        "1",
        "1",
        "1000",
    )
    assert waiting["-t"] == full["-t"] and (waiting["-p"], waiting["-A"]) == ("gpu", "proj42")  # it may wait as long
    own = ("-t", "--output", "-D")  # the limit the bill sets, and each study's folder
    assert retry["--gres"] == "gpu:a100:4"
    assert {k: v for k, v in retry.items() if k not in own} == {k: v for k, v in full.items() if k not in own}
    # and the cells around it are not held
    assert options(sbatch_lines(tmp_path / "other", config)[("native", 2)])["--gres"] == "gpu:a100:2"
