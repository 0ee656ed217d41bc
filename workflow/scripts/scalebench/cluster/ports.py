"""The ports a cell listens on, chosen so that two cells sharing a node never collide.

A cell owns one block of PORT_BLOCK consecutive ports: the first is its
rendezvous (MASTER_PORT: torchrun's or torch's TCP store, Horovod's rendezvous
server under horovod_srun.py), the others are its TensorFlow workers, one per
rank on an address. Everything else a cell listens on (Gloo, NCCL, gRPC
clients) takes an ephemeral port from the kernel, above both ranges below.

- Under SLURM the batch step (launch.py, on the job's first node) starts from the
  job id's block (ids map to the SLURM_BLOCKS blocks in turn) and takes the first
  block, from there on, that no other scalebench launcher on this node holds and
  whose ports are all free now; the ranks get it as MASTER_PORT. So two cells on
  one node never collide, whatever their job ids (ids that differ by a multiple
  of SLURM_BLOCKS map to the same block: the second takes the next free one). A
  block holds MAX_RANKS_PER_NODE workers per address, which the config
  validation enforces. Ports on a cell's other nodes are checked only where
  their own cells' first nodes are: a multi-node TensorFlow cell could still
  meet a cell that started on its second node at the same instant.
- Locally there is no job id: the launcher takes the first block of the local
  range that no other scalebench launcher on this host holds (an flock on a
  file per block, held until the launcher exits) and whose ports are all free
  now. The local range lies above the SLURM range, so local cells and SLURM
  cells on one host (a test cluster) never meet either.

Both ranges lie below Linux's ephemeral range (32768-60999), so no outgoing
connection takes one of these ports. Software that picks its own ports at
random over the whole range (horovodrun's services) is outside this scheme.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from scalebench import locks

MAX_RANKS_PER_NODE = 64
PORT_BLOCK = 1 + MAX_RANKS_PER_NODE  # the rendezvous, then one TensorFlow worker per rank on an address
SLURM_BASE, SLURM_END = 12000, 30000
SLURM_BLOCKS = (SLURM_END - SLURM_BASE) // PORT_BLOCK
LOCAL_BASE, LOCAL_END = 30000, 32768
LOCAL_BLOCKS = (LOCAL_END - LOCAL_BASE) // PORT_BLOCK
LOCK_DIR = Path(tempfile.gettempdir()) / "scalebench-ports"


class PortError(RuntimeError):
    """No port block can be had, or a rank does not fit its block; the message says why."""


def port_for_job(job_id: str | int) -> int:
    """The first port (the rendezvous) of SLURM job `job_id`'s block."""
    return SLURM_BASE + (int(job_id) % SLURM_BLOCKS) * PORT_BLOCK


def worker_port(block_start: int, index_on_address: int) -> int:
    """The port of the TensorFlow worker that is the `index_on_address`-th rank on its address."""
    if not 0 <= index_on_address < MAX_RANKS_PER_NODE:
        raise PortError(
            f"{index_on_address + 1} TensorFlow workers on one address: a cell's port block holds "
            f"{MAX_RANKS_PER_NODE} (cluster.gpus_per_node / cluster.ranks_per_node at most {MAX_RANKS_PER_NODE})"
        )
    return block_start + 1 + index_on_address


def free_port() -> int:
    """A port the OS reports free now (one rank alone, which nobody has to find)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no obstacle
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _reserve(kind: str, base: int, blocks: list[int], lock_dir: str | Path) -> int | None:
    """The first port of the first of `blocks` (block numbers from `base`) that no other launcher
    holds and whose ports are all free now, held by this process until it exits; None if none is."""
    lock_dir = locks.shared_folder(lock_dir)
    for block in blocks:
        handle = locks.try_lock(f"{kind}-{block}", lock_dir)
        if handle is None:
            continue
        start = base + block * PORT_BLOCK
        if all(_bindable(port) for port in range(start, start + PORT_BLOCK)):
            locks.keep(handle)
            return start
        handle.close()  # something outside scalebench listens there
    return None


def reserve_local_block(lock_dir: str | Path = LOCK_DIR) -> int:
    """The first port of a local block held by this process until it exits."""
    start = _reserve("block", LOCAL_BASE, list(range(LOCAL_BLOCKS)), lock_dir)
    if start is None:
        raise PortError(f"all {LOCAL_BLOCKS} local port blocks ({LOCAL_BASE}-{LOCAL_END - 1}) are in use on this host")
    return start


def reserve_slurm_block(job_id: str | int, lock_dir: str | Path = LOCK_DIR) -> int:
    """The first port of SLURM job `job_id`'s block on this node: the job id's own block where it is
    free, else the next free one (held by this process until it exits)."""
    own = int(job_id) % SLURM_BLOCKS
    start = _reserve("slurm", SLURM_BASE, [(own + i) % SLURM_BLOCKS for i in range(SLURM_BLOCKS)], lock_dir)
    if start is None:
        raise PortError(f"all {SLURM_BLOCKS} SLURM port blocks ({SLURM_BASE}-{SLURM_END - 1}) are in use on this node")
    if start != port_for_job(job_id):
        print(f"ports: job {job_id}'s block {port_for_job(job_id)} is taken on this node; using {start}", flush=True)
    return start
