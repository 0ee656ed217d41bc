"""cluster.network_interface: every library is told the interface, and a node without it is named."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import REPO, tiny_config
from scalebench import config as sb_config
from scalebench import environments
from scalebench.cell import Cell
from scalebench.cluster import network
from scalebench.cluster.slurm import Allocation, SlurmError
from scalebench.launch.launcher import rank_environment
from scalebench.refusal import Refused
from scalebench.train import rank_env, tf_config


def test_the_interface_s_address_or_a_refusal_naming_the_key_and_the_nodes_interfaces():
    available = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5"], "ib0": []}
    assert network.address_of("eth0", available) == "10.0.0.5"
    with pytest.raises(network.InterfaceMissing, match=r"cluster.network_interface is 'ib1', but there is no such"):
        network.address_of("ib1", available)
    with pytest.raises(Refused, match=r"it has: eth0 \(10.0.0.5\), ib0 \(no IPv4 address\), lo \(127.0.0.1\)"):
        network.address_of("ib1", available)
    with pytest.raises(network.InterfaceMissing, match="no IPv4 address on node"):
        network.address_of("ib0", available)
    assert network.address_of("lo") == "127.0.0.1"  # this machine's own loopback, read with psutil


def test_every_library_and_the_ranks_are_told_the_interface():
    allocation = Allocation("local", ["localhost"], "127.0.0.1", 30000, 1)
    torch_environment = environments.resolve("torch")  # the cell's framework's, as launch.py resolves it
    env = rank_environment(1, allocation, torch_environment, "ib0")
    assert {key: env[key] for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")} == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "HOROVOD_GLOO_IFACE": "ib0",
    }
    assert env[network.VARIABLE] == "ib0"
    assert network.VARIABLE not in rank_environment(1, allocation, torch_environment)


def test_tensorflow_workers_on_one_node_are_named_by_the_interfaces_address():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "30000"}
    info = rank_env.detect(env)
    plain = tf_config.build_tf_config(info, env)["cluster"]["worker"]
    chosen = tf_config.build_tf_config(info, {**env, network.VARIABLE: "lo"})["cluster"]["worker"]
    assert plain == ["localhost:30001", "localhost:30002"]
    assert chosen == ["127.0.0.1:30001", "127.0.0.1:30002"]


def test_the_key_is_a_setting_only_where_set(schema):
    cell = Cell("torch", "native", 2, 1)
    plain = sb_config.validate(tiny_config(), schema)
    assert plain["cluster"]["network_interface"] is None
    assert "network_interface" not in sb_config.train_settings(plain, cell)  # finished cells stay valid
    chosen = sb_config.validate(tiny_config(cluster={"network_interface": "ib0"}), schema)
    assert sb_config.train_settings(chosen, cell)["network_interface"] == "ib0"
    with pytest.raises(sb_config.ConfigError, match="cluster.network_interface"):
        sb_config.validate(tiny_config(cluster={"network_interface": ""}), schema)


def test_schema_documents_the_key():
    text = (REPO / "config" / "README.md").read_text()
    assert "`cluster.network_interface`" in text


def two_node_tf_env(**extra: str) -> dict[str, str]:
    """Rank 2 of four TensorFlow workers on two SLURM nodes (two per node), as srun starts them."""
    return {
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_ID": "1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "MASTER_PORT": "30000",
        **extra,
    }


def test_tensorflow_workers_on_several_nodes_are_named_by_each_node_s_interface_address():
    # what launch.py exports after gathering every node's address on the interface
    allocation = Allocation("slurm", ["gpu01", "gpu02"], "10.1.0.1", 30000, 1, ("10.0.0.1", "10.0.0.2"))
    allocation = dataclasses.replace(allocation, interface_addresses=("127.0.0.1", "127.0.0.2"))
    exported = rank_environment(1, allocation, environments.resolve("tensorflow"), "lo")
    assert exported[network.ADDRESSES] == "gpu01=127.0.0.1,gpu02=127.0.0.2"
    env = two_node_tf_env(**{key: exported[key] for key in (network.VARIABLE, network.ADDRESSES)})
    workers = tf_config.build_tf_config(rank_env.detect(env), env)["cluster"]["worker"]
    assert [w.rsplit(":", 1)[0] for w in workers] == ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"]
    assert len(set(workers)) == 4
    # two node names on one address (a test cluster) still get distinct ports
    same = two_node_tf_env(**{network.VARIABLE: "lo", network.ADDRESSES: "gpu01=127.0.0.1,gpu02=127.0.0.1"})
    assert len(set(tf_config.build_tf_config(rank_env.detect(same), same)["cluster"]["worker"])) == 4


def test_tensorflow_workers_on_several_nodes_without_the_gathered_addresses_are_refused():
    env = two_node_tf_env(**{network.VARIABLE: "lo", network.ADDRESSES: "gpu01=127.0.0.1"})
    with pytest.raises(tf_config.ClusterMismatch, match="no address of it was exported for gpu02"):
        tf_config.build_tf_config(rank_env.detect(env), env)


def test_each_node_reports_its_address_or_why_it_has_none():
    assert network.node_report("lo") == f"{network.node_name()}=127.0.0.1"  # this machine's, through psutil
    assert network.node_report("nosuch0").startswith(f"{network.node_name()}!cluster.network_interface is")
    reports = "gpu02=10.0.0.2\ngpu01=10.0.0.1\n"
    assert network.parse_reports(reports, ["gpu01", "gpu02"]) == ("10.0.0.1", "10.0.0.2")
    with pytest.raises(network.InterfaceMissing, match="no such interface on node gpu02"):
        network.parse_reports(
            "gpu01=10.0.0.1\ngpu02!cluster.network_interface is 'ib0', but there is no such "
            "interface on node gpu02; it has: lo (127.0.0.1)\n",
            ["gpu01", "gpu02"],
        )
    with pytest.raises(SlurmError, match="no address of the interface came back from gpu02"):
        network.parse_reports("gpu01=10.0.0.1\n", ["gpu01", "gpu02"])
