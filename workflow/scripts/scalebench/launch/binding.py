"""Where a cell's processes run: a local cell's own GPU ids and cores, srun's CPU binding.

launch.py adds these variables to its ranks' environment (the ranks bind themselves with
them, train/binding.py):

- locally, the GPU ids the cell holds from this machine's (launch/local_pool.py) as the ranks'
  CUDA_VISIBLE_DEVICES, indices in nvidia-smi's order (CUDA_DEVICE_ORDER=PCI_BUS_ID unless set);
  with cluster.cpu_binding: cores, the cores it holds for its ranks, nearest its GPUs;
- under SLURM, the allocation decides the GPUs, and srun binds each task to its
  cluster.cpus_per_rank cores (SLURM_CPU_BIND, which srun reads as --cpu-bind).
"""

from __future__ import annotations

from collections.abc import Mapping

from scalebench.cluster import cpu_binding, gpu_ids, nvidia_smi
from scalebench.launch import local_pool


def near_cores(ids: list[str]) -> set[int]:
    """The cores nearest the GPUs `ids` (nvidia-smi topo -m), empty where the topology is unknown."""
    if not ids:
        return set()
    text, _ = nvidia_smi.call("topo", "-m")
    topology = nvidia_smi.parse_topology(text or "")
    texts = [topology.gpu_cpus(int(gpu)) for gpu in ids if gpu.isdigit()]
    return {cpu for text in texts if text for cpu in cpu_binding.parse_cpus(text)}


def slurm_environment(setting: str, cpus_per_rank: int) -> dict[str, str]:
    """srun's binding of each task to its share of the allocation's cores (or none), and the ranks' word."""
    return {
        "SLURM_CPU_BIND": "cores" if setting == "cores" else "none",
        cpu_binding.BIND: setting,
        cpu_binding.SHARE: str(cpus_per_rank),
    }


def local_environment(
    setting: str, device: str, gpus: int, processes: int, threads: int, env: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """(the variables that place a local cell's processes on the GPU ids and cores it now holds, lines
    for the log). Waits while other cells hold the GPUs it needs (local_pool.py)."""
    ids, pool = gpu_ids.machine_ids(env), local_pool.pool_dir(env)
    held = local_pool.hold_gpus(gpu_ids.gpus_taken(device, gpus, len(ids)), ids, pool)
    placed = {gpu_ids.HELD: ",".join(held), cpu_binding.BIND: setting}
    said = []
    if held:
        placed[gpu_ids.VARIABLE] = ",".join(held)
        placed["CUDA_DEVICE_ORDER"] = env.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        said.append(f"GPU(s) {','.join(held)} of this machine, held for this cell")
    if setting != "cores":
        return placed, said
    cores, why = local_pool.hold_cores(processes * threads, cpu_binding.affinity(), near_cores(held), pool)
    if cores is None:
        placed[cpu_binding.UNBOUND] = f"launch.py held no cores for the ranks: {why}"
        said.append(f"ranks not bound: {why}")
    else:
        placed[cpu_binding.CELL_CPUS] = cpu_binding.format_cpus(cores)
        placed[cpu_binding.SHARE] = str(threads)
        said.append(f"cores {cpu_binding.format_cpus(cores)} held for {processes} process(es) of {threads} each")
    return placed, said
