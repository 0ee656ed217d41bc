"""A GPU cell's own GPU id, its rank's cores and its site record, against what nvidia-smi and torch
report on this machine (issue 33). Skipped where torch sees no CUDA device."""

from __future__ import annotations

import subprocess

import pytest
import torch
from gpu_cells import train_on_gpu
from scalebench.cluster import cpu_binding, gpu_ids, nvidia_smi

ENVIRONMENT = "torch"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]


def test_a_gpu_cell_holds_its_gpu_and_records_the_site_nvidia_smi_and_torch_show(prepared_data, tmp_path):
    run, _, log = train_on_gpu("native", 1, prepared_data, tmp_path / "cell", {"SCALEBENCH_LOCAL_POOL": str(tmp_path)})
    assert run, log[-3000:]
    held = run["local_gpu_ids"]
    assert held == gpu_ids.machine_ids()[:1]  # the first free id of this machine's
    query = ["nvidia-smi", f"--id={held[0]}", "--query-gpu=driver_version,name", "--format=csv,noheader"]
    driver, name = [part.strip() for part in subprocess.run(query, capture_output=True, text=True).stdout.split(",")]
    site = run["site"]
    assert site["driver"] == driver and name in {gpu["name"] for gpu in site["gpus"].values()}
    # NCCL and the CUDA runtime as this rank's process loaded them, as torch reports them
    assert ".".join(map(str, torch.cuda.nccl.version())) in site["libraries"]["nccl"].values(), site["libraries"]
    runtimes = {version.split(".")[0] for version in site["libraries"]["cuda_runtime"].values()}
    assert torch.version.cuda.split(".")[0] in runtimes, site["libraries"]
    # its rank is bound, on the cores nearest its GPU where nvidia-smi names them and they were free
    assert run["cpu_bound_by"] == "launch.py", run["cpu_binding_reason"]
    text, _ = nvidia_smi.call("topo", "-m")
    near = nvidia_smi.parse_topology(text or "").gpu_cpus(int(held[0])) if held[0].isdigit() else None
    bound = cpu_binding.parse_cpus(run["rank_cpus"][0])
    assert len(bound) == run["threads_per_rank"]
    nearby = set(cpu_binding.parse_cpus(near)) & set(cpu_binding.affinity()) if near else set()
    if len(nearby) >= len(bound):  # the test's own pool: every core was free
        assert set(bound) <= nearby, (bound, near)
