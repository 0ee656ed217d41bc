"""A real SLURM cluster on this machine for the test suite: munged, slurmctld and
one slurmd per node (several slurmd on one host via ``slurmd -N name``).

Everything lives in one temporary folder: munge key and socket, slurm.conf,
state, spool and logs. The controller serves its config ("configless"), and
each slurmd fetches it with ``--conf-server``; slurmd then links it to
/run/slurm/conf, where SLURM's client commands look when SLURM_CONF is unset.
That matters because the SLURM jobstep plugin removes SLURM_CONF (with every
other SLURM_* variable) from the environment of the job's command, just as on
a real cluster where clients read the node's default config.

Debian 12's packages are installed when missing (CI runs as root):
``apt-get install slurmctld slurmd slurm-client munge``.

The test suite starts one cluster per run and hands each test nodes of its own in a partition of
its own (`Partition`, tests/cluster/conftest.py); the cluster's facts are kept in its folder
(cluster.json and the daemons' pid files), so any process can stop it:
``python tests/cluster/slurm_cluster.py stop FOLDER``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "srun")
CLIENT_CONFIG_LINK = Path("/run/slurm/conf")
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARK = "# scalebench test cluster"
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


class ClusterError(RuntimeError):
    """SLURM could not be installed or started; the message says why."""


def install_packages() -> None:
    """apt-get install Debian's SLURM packages when a binary is missing (needs root)."""
    if all(shutil.which(b) for b in BINARIES):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        missing = [b for b in BINARIES if not shutil.which(b)]
        raise ClusterError(
            f"SLURM is not installed ({', '.join(missing)} missing) and apt-get as root is not available"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode:
            raise ClusterError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")


def free_ports(count: int) -> list[int]:
    """`count` different ports free now. Each is free only once its socket closes, so asked one at a time
    the kernel may hand out one twice (a slurmd given the controller's port failed to start)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class SlurmCluster:
    """A cluster of `nodes` (names) on this host, each with `cpus` CPUs and `mem_mb` memory."""

    root: Path
    nodes: list[str]
    cpus: int = 4
    mem_mb: int = 6000
    partition: str = "debug"
    pids: dict[str, int] = field(default_factory=dict)
    default_partition_up: bool = True  # False: jobs run only in partitions made with partition_of

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @classmethod
    def load(cls, root: Path) -> SlurmCluster:
        """The cluster started in `root` (by this process or another)."""
        facts = json.loads((root / "cluster.json").read_text())
        cluster = cls(root, facts["nodes"], facts["cpus"], facts["mem_mb"], facts["partition"], facts["pids"])
        cluster.default_partition_up = facts["default_partition_up"]
        cluster.ctld_port = facts["ctld_port"]
        return cluster

    def _save(self) -> None:
        facts = {"nodes": self.nodes, "cpus": self.cpus, "mem_mb": self.mem_mb, "partition": self.partition}
        facts["default_partition_up"] = self.default_partition_up
        facts.update(pids={"munged": self.pids["munged"]} if "munged" in self.pids else {}, ctld_port=self.ctld_port)
        (self.root / "cluster.json").write_text(json.dumps(facts))

    def env(self) -> dict[str, str]:
        """Environment for client commands run by the tests (sbatch, squeue, snakemake)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def log(self, daemon: str) -> Path:
        return self.root / "log" / f"{daemon}.log"

    # --- start -------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60) -> None:
        install_packages()
        if os.geteuid() != 0:
            raise ClusterError("the test cluster runs its daemons as root (SlurmUser=root)")
        if Path("/etc/slurm/slurm.conf").exists():
            raise ClusterError(
                "/etc/slurm/slurm.conf exists: this machine belongs to a real SLURM cluster, "
                "whose config SLURM clients inside test jobs would read; run the cluster tests elsewhere"
            )
        for sub in ("etc", "log", "state", "spool", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        self._add_host_names()
        self._start_munge()
        self._write_config()
        self._run_daemon(
            "slurmctld", ["slurmctld", "-f", str(self.conf), "-L", str(self.log("slurmctld"))], "slurmctld.pid"
        )
        self._wait(
            lambda: self._ok(["scontrol", "ping"]) and "UP" in self._out(["scontrol", "ping"]), timeout_s, "slurmctld"
        )
        for node in self.nodes:
            self.start_slurmd(node)
        self._save()
        self._wait(lambda: self.idle(self.nodes), timeout_s, "the nodes to become idle")

    def start_slurmd(self, node: str) -> None:
        """Start `node`'s slurmd (again, after kill_slurmd: a node that comes back)."""
        pidfile = f"slurmd.{node}.pid"
        (self.root / pidfile).unlink(missing_ok=True)  # a killed daemon's, which would read as the new one's
        self._run_daemon(
            f"slurmd.{node}", ["slurmd", "-N", node, "--conf-server", f"127.0.0.1:{self.ctld_port}"], pidfile
        )

    def kill_slurmd(self, node: str) -> None:
        """Kill `node`'s slurmd at once (SIGKILL), as a node that dies loses it."""
        os.kill(self._pid(f"slurmd.{node}"), signal.SIGKILL)
        self.pids.pop(f"slurmd.{node}", None)

    def _pid(self, daemon: str) -> int | None:
        """A daemon's process id, from its pid file (any process may have started it) or as started here."""
        path = self.root / f"{daemon}.pid"
        text = path.read_text().strip() if path.exists() else ""
        return int(text) if text.isdigit() else self.pids.get(daemon)

    def _add_host_names(self) -> None:
        """Make the node names resolve to 127.0.0.1, as node names resolve on a real cluster."""
        unresolved = []
        for node in self.nodes:
            try:
                socket.gethostbyname(node)
            except OSError:
                unresolved.append(node)
        if unresolved:
            with open(HOSTS_FILE, "a") as handle:  # appended in place: /etc/hosts may be a mount
                handle.write(f"127.0.0.1 {' '.join(unresolved)} {HOSTS_MARK} {self.root}\n")

    def _remove_host_names(self) -> None:
        if not HOSTS_FILE.exists():
            return
        lines = HOSTS_FILE.read_text().splitlines(keepends=True)
        kept = [line for line in lines if f"{HOSTS_MARK} {self.root}" not in line]
        if len(kept) != len(lines):
            with open(HOSTS_FILE, "r+") as handle:
                handle.write("".join(kept))
                handle.truncate()

    def _start_munge(self) -> None:
        """Use the host's munged when one answers on the default socket, else start our own there.

        Configless slurmd authenticates before it has read slurm.conf, so munge must
        listen on the default socket (AuthInfo=socket=... would come too late).
        """
        if self._munge_works():
            return
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        pidfile = self.root / "munge" / "munged.pid"
        command = [
            "munged",
            "--force",
            f"--key-file={key}",
            f"--socket={MUNGE_SOCKET}",
            f"--pid-file={pidfile}",
            f"--log-file={self.log('munged')}",
            f"--seed-file={self.root / 'munge' / 'munged.seed'}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        if result.returncode:
            raise ClusterError(f"munged failed to start: {result.stderr.strip()}")
        self.pids["munged"] = int(pidfile.read_text())
        self._wait(self._munge_works, 20, "munged")

    @staticmethod
    def _munge_works() -> bool:
        if not MUNGE_SOCKET.exists():
            return False
        credential = subprocess.run(["munge", "-n", "-S", str(MUNGE_SOCKET)], capture_output=True, timeout=10)
        if credential.returncode:
            return False
        decoded = subprocess.run(
            ["unmunge", "-S", str(MUNGE_SOCKET)], input=credential.stdout, capture_output=True, timeout=10
        )
        return decoded.returncode == 0

    def _write_config(self) -> None:
        self.ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        host = socket.gethostname()
        lines = [
            "ClusterName=scalebench",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "SlurmctldParameters=enable_configless",
            "SlurmdParameters=config_overrides",  # declare more CPUs than the machine has
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd'}.%n.pid",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={self.root / 'log'}/slurmd.%n.log",
            "ProctrackType=proctrack/linuxproc",  # no cgroups in containers
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",  # squeue must still see finished jobs when snakemake asks
            # a site that does not requeue by default: a job runs again under its id only where it was
            # submitted requeueable (profiles/slurm's slurm-requeue; test_slurm_survival.py's requeue)
            "JobRequeue=0",
            # a partition of a higher PriorityTier preempts the jobs of a lower one on its nodes, each
            # partition's PreemptMode saying how (test_slurm_stuck.py); the tests' own partitions share
            # one tier and no node, so they never preempt each other
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            "EnforcePartLimits=ALL",  # refuse impossible jobs at submission, as production clusters do
            "KillWait=5",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            # a node whose slurmd stops answering is DOWN after this plus one or two pings (slurmctld pings
            # every third of it and judges by the previous ping: 26 s here, measured, 40-50 s at 30): the lost-node
            # test waits for that; a live slurmd answers every ping within a second, even here, so three
            # missed pings in a row are a dead one
            "SlurmdTimeout=15",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for node, port in zip(self.nodes, node_ports, strict=True):
            lines.append(
                f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} "
                f"CPUs={self.cpus} RealMemory={self.mem_mb} State=UNKNOWN"
            )
        # inactive where each test has a partition of its own: a job that names none is refused, not run
        # on another test's nodes
        state = "UP" if self.default_partition_up else "INACTIVE"
        lines.append(
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State={state} OverSubscribe=NO"
        )
        self.conf.write_text("\n".join(lines) + "\n")

    def _run_daemon(self, name: str, command: list[str], pidfile: str) -> None:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=self.env())
        if result.returncode:
            raise ClusterError(f"{name} failed to start: {result.stderr.strip()}\n{self._tail(name)}")
        path = self.root / pidfile
        self._wait(lambda: path.exists() and path.read_text().strip().isdigit(), 20, f"{name}'s pid file")
        self.pids[name] = int(path.read_text().strip())

    def states(self) -> dict[str, str]:
        """Each node's state as sinfo abbreviates it (idle, alloc, down*, ...)."""
        lines = self._out(["sinfo", "-h", "-N", "-o", "%N %t"]).split("\n")
        return dict(line.split() for line in lines if len(line.split()) == 2)

    def idle(self, nodes: list[str]) -> bool:
        states = self.states()
        return all(states.get(node) == "idle" for node in nodes)

    # --- a partition of some nodes, for one test ------------------------------------------------
    def partition_of(self, name: str, nodes: list[str]) -> Partition:
        """A new partition `name` of `nodes` (scontrol create): a test's own part of the cluster."""
        command = ["scontrol", "create", f"PartitionName={name}", f"Nodes={','.join(nodes)}"]
        command += ["MaxTime=INFINITE", "State=UP", "OverSubscribe=NO"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=self.env())
        if result.returncode:
            raise ClusterError(f"{' '.join(command)} failed: {result.stderr.strip()}")
        return Partition(self, name, nodes)

    def give_back(self, part: Partition, timeout_s: float = 120) -> bool:
        """Cancel the partition's jobs, bring its nodes back (a killed slurmd restarted, a node that
        was down resumed) and delete it; whether its nodes are idle again, for the next test."""
        subprocess.run(["scancel", "--full", "-p", part.name], capture_output=True, timeout=30, env=self.env())
        self._wait_gone_jobs(30, part.name)
        for node in part.nodes:
            pid = self._pid(f"slurmd.{node}")
            if pid is None or not _alive(pid):
                self.start_slurmd(node)
        deadline = time.monotonic() + timeout_s
        while not self.idle(part.nodes) and time.monotonic() < deadline:
            down = [n for n, state in self.states().items() if n in part.nodes and state.startswith(("down", "drain"))]
            if down:
                update = ["scontrol", "update", f"NodeName={','.join(down)}", "State=RESUME"]
                subprocess.run(update, capture_output=True, timeout=30, env=self.env())
            time.sleep(0.5)
        subprocess.run(
            ["scontrol", "delete", f"PartitionName={part.name}"], capture_output=True, timeout=30, env=self.env()
        )
        return self.idle(part.nodes)

    # --- helpers -----------------------------------------------------------------------------
    def _out(self, command: list[str]) -> str:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=self.env())
        return result.stdout.strip()

    def _ok(self, command: list[str]) -> bool:
        return subprocess.run(command, capture_output=True, timeout=30, env=self.env()).returncode == 0

    def _tail(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def _wait(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.5)
        logs = "\n".join(f"--- {n}\n{self._tail(n)}" for n in ("slurmctld", *(f"slurmd.{x}" for x in self.nodes)))
        raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")

    def squeue(self) -> str:
        return self._out(["squeue", "-h", "-o", "%i %j %T %N"])

    # --- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel all jobs and stop every daemon this cluster started; no process is left."""
        if self._pid("slurmctld") is not None:
            subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, timeout=30, env=self.env())
            self._wait_gone_jobs(15)
        # every slurmd at once (each takes about 2 s to go: one at a time, eight of them were 16 of the
        # run's last seconds), then the controller they report to, then munge that both authenticate with
        for names in ([f"slurmd.{node}" for node in self.nodes], ["slurmctld"], ["munged"]):
            pids = [self._pid(name) if name != "munged" else self.pids.get(name) for name in names]
            for name in names:
                self.pids.pop(name, None)
            self._terminate([pid for pid in pids if pid is not None])
        # slurmd's configless mode links /run/slurm/conf to its cache in our folder
        if CLIENT_CONFIG_LINK.is_symlink() and str(self.root) in os.readlink(CLIENT_CONFIG_LINK):
            CLIENT_CONFIG_LINK.unlink()
        self._remove_host_names()

    def _wait_gone_jobs(self, timeout_s: float, partition: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = self._out(["squeue", "-h", "-o", "%T", *(["-p", partition] if partition else [])]).split()
            if not [s for s in states if s in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING")]:
                return
            time.sleep(0.5)

    @staticmethod
    def _terminate(pids: list[int], timeout_s: float = 15) -> None:
        """SIGTERM to each of `pids`, then SIGKILL to any still there after `timeout_s`."""
        waiting = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
                waiting.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            time.sleep(0.1)
            waiting = [pid for pid in waiting if _alive(pid)]
        for pid in waiting:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Partition:
    """A test's part of the cluster: its nodes in a partition of their own. SLURM's clients take the
    partition from the environment (env()), as a site's default partition, so every job of the
    test's Snakemake, and every sbatch --test-only of its pre-flight, lands on these nodes only."""

    cluster: SlurmCluster
    name: str
    nodes: list[str]

    @property
    def root(self) -> Path:
        return self.cluster.root

    @property
    def conf(self) -> Path:
        return self.cluster.conf

    def env(self) -> dict[str, str]:
        """The environment of client commands in this partition (sbatch, srun, squeue, sinfo, snakemake)."""
        variables = ("SBATCH_PARTITION", "SLURM_PARTITION", "SALLOC_PARTITION", "SINFO_PARTITION", "SQUEUE_PARTITION")
        return {**self.cluster.env(), **dict.fromkeys(variables, self.name)}

    def squeue(self) -> str:
        return self.cluster._out(["squeue", "-h", "-p", self.name, "-o", "%i %j %T %N"])

    def kill_slurmd(self, node: str) -> None:
        assert node in self.nodes, f"{node} is not a node of partition {self.name}"
        self.cluster.kill_slurmd(node)

    def start_slurmd(self, node: str) -> None:
        assert node in self.nodes, f"{node} is not a node of partition {self.name}"
        self.cluster.start_slurmd(node)


if __name__ == "__main__":  # python slurm_cluster.py stop FOLDER: what the test run does when it ends
    if sys.argv[1:2] != ["stop"] or len(sys.argv) != 3:
        sys.exit("usage: slurm_cluster.py stop FOLDER")
    SlurmCluster.load(Path(sys.argv[2])).stop()
