"""cluster.network_interface: every library is told the interface, and a node without it is named."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, cell_settings, launch_cell, tiny_config
from scalebench import config as sb_config
from scalebench.cell import Cell
from scalebench.launch import network, rank_env, tf_config
from scalebench.launch.launcher import rank_environment
from scalebench.launch.slurm import Allocation
from scalebench.train.refusal import Refused


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
    env = rank_environment(1, allocation, "ib0")
    assert {key: env[key] for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")} == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "HOROVOD_GLOO_IFACE": "ib0",
    }
    assert env[network.VARIABLE] == "ib0"
    assert network.VARIABLE not in rank_environment(1, allocation)


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


@pytest.mark.integration
def test_a_cell_trains_over_the_interface_and_records_it(prepared_data, tmp_path):
    settings = {**cell_settings("torch", "native", 2, epochs=1), "network_interface": "lo"}
    result = launch_cell(settings, prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--master-addr=127.0.0.1" in result.stdout
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "ok" and run["network_interface"] == "lo"


@pytest.mark.integration
def test_an_interface_the_node_lacks_refuses_the_cell_at_its_first_attempt(prepared_data, tmp_path):
    settings = {**cell_settings("torch", "native", 2, epochs=1), "network_interface": "nosuch0"}
    result = launch_cell(settings, prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr  # refused: recorded, not retried
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "refused"
    assert "cluster.network_interface is 'nosuch0'" in run["reason"] and "lo (127.0.0.1)" in run["reason"]
    assert "torchrun" not in result.stdout  # no rank was started


def test_schema_documents_the_key():
    text = (REPO / "README.md").read_text()
    assert "`cluster.network_interface`" in text
