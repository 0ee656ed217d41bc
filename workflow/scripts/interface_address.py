"""Print this node's address on a network interface (run by launch.py on every node; see scalebench/cluster/network.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.cluster.network import node_report  # noqa: E402

if __name__ == "__main__":
    print(node_report(sys.argv[1]), flush=True)
