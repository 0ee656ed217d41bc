"""cluster.network_interface: the one network interface a cell's collectives and rendezvous use.

On nodes with several interfaces (Ethernet beside InfiniBand, a management
network), or whose host name resolves to 127.0.1.1, each library picks its own
and a multi-node cell fails or runs over a slow link: the very thing a scaling
study measures. With the key set, launch.py checks the interface on the cell's
first node, puts the rendezvous on its address and tells every library to use
it (collective_environment); each rank checks its own node has it (check_node),
so a name a node lacks ends the cell at its first attempt, refused, with the
node's interfaces in the reason. On several SLURM nodes launch.py first asks
every node for its address on the interface (gather_addresses: one srun step,
one task per node) and exports them (ADDRESSES), so TensorFlow names every
worker by it: a rank knows no other node's interfaces by itself.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from scalebench.cluster.slurm import SlurmError
from scalebench.refusal import Refused

KEY = "cluster.network_interface"
VARIABLE = "SCALEBENCH_NETWORK_INTERFACE"  # launch.py -> ranks: the interface's name
ADDRESSES = "SCALEBENCH_INTERFACE_ADDRS"  # launch.py -> ranks: "node=address,..." on the interface
NODE_SCRIPT = Path(__file__).resolve().parents[2] / "interface_address.py"


class InterfaceMissing(Refused, RuntimeError):
    """This node has no interface of the configured name (or it has no IPv4 address)."""


def interfaces() -> dict[str, list[str]]:
    """This node's interfaces and their IPv4 addresses."""
    import psutil

    return {
        name: [a.address for a in addresses if a.family == socket.AF_INET]
        for name, addresses in psutil.net_if_addrs().items()
    }


def address_of(name: str, available: Mapping[str, list[str]] | None = None) -> str:
    """The IPv4 address of interface `name` on this node, or InterfaceMissing naming the key and
    the node's interfaces."""
    available = interfaces() if available is None else available
    addresses = available.get(name)
    if addresses:
        return addresses[0]
    listing = ", ".join(f"{n} ({', '.join(a) or 'no IPv4 address'})" for n, a in sorted(available.items()))
    what = "no IPv4 address on" if name in available else "no such interface on"
    raise InterfaceMissing(f"{KEY} is {name!r}, but there is {what} node {socket.gethostname()}; it has: {listing}")


def collective_environment(name: str) -> dict[str, str]:
    """The variables that make NCCL, Gloo (PyTorch's and Horovod's) and the ranks use interface `name`."""
    return {
        "NCCL_SOCKET_IFNAME": name,  # NCCL's bootstrap and socket transport (not its InfiniBand choice)
        "GLOO_SOCKET_IFNAME": name,  # torch.distributed's Gloo
        "HOROVOD_GLOO_IFACE": name,  # Horovod's Gloo controller and operations
        VARIABLE: name,
    }


def check_node(env: Mapping[str, str] | None = None) -> str | None:
    """The address of the configured interface on this rank's node (None when none is configured)."""
    env = os.environ if env is None else env
    name = env.get(VARIABLE)
    return address_of(name) if name else None


def node_name() -> str:
    """SLURM's name of this node (nodes may share a hostname), else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_report(name: str) -> str:
    """One node's answer to gather_addresses: "node=address", or "node!why" where it lacks one."""
    try:
        return f"{node_name()}={address_of(name)}"
    except InterfaceMissing as error:
        return f"{node_name()}!{error}"


def parse_reports(output: str, hosts: list[str]) -> tuple[str, ...]:
    """Each host's address (in the order of `hosts`) from the nodes' reports, or InterfaceMissing
    naming the nodes that lack it; a node that did not answer is a SlurmError."""
    addresses, missing = {}, []
    for line in output.splitlines():
        name, sep, address = line.strip().partition("=")
        if sep:
            addresses[name] = address
        elif "!" in line:
            missing.append(line.strip().split("!", 1)[1])
    if missing:
        raise InterfaceMissing("; ".join(missing))
    silent = [host for host in hosts if host not in addresses]
    if silent:
        raise SlurmError(f"no address of the interface came back from {', '.join(silent)}:\n{output[-2000:]}")
    return tuple(addresses[host] for host in hosts)


def gather_addresses(name: str, hosts: list[str], step_wait_s: int | None = None) -> tuple[str, ...]:
    """The address of interface `name` on each of the allocation's `hosts`: one srun step with one
    task per node, run once by launch.py before the ranks start (SlurmError where srun fails);
    `step_wait_s`: srun's --immediate (cluster.step_wait_s), None to wait as long as srun does."""
    command = [
        "srun",
        *([f"--immediate={step_wait_s}"] if step_wait_s else []),
        f"--nodes={len(hosts)}",
        f"--ntasks={len(hosts)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts)}",
        sys.executable,
        str(NODE_SCRIPT),
        name,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"{' '.join(command)} failed: {error}") from error
    if result.returncode:
        raise SlurmError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return parse_reports(result.stdout, hosts)
