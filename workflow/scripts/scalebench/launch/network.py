"""cluster.network_interface: the one network interface a cell's collectives and rendezvous use.

On nodes with several interfaces (Ethernet beside InfiniBand, a management
network), or whose host name resolves to 127.0.1.1, each library picks its own
and a multi-node cell fails or runs over a slow link: the very thing a scaling
study measures. With the key set, launch.py checks the interface on the cell's
first node, puts the rendezvous on its address and tells every library to use
it (collective_environment); each rank checks its own node has it (check_node),
so a name a node lacks ends the cell at its first attempt, refused, with the
node's interfaces in the reason.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from scalebench.train.refusal import Refused

KEY = "cluster.network_interface"
VARIABLE = "SCALEBENCH_NETWORK_INTERFACE"  # launch.py -> ranks: the interface's name


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
