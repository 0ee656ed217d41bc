"""Launcher templates, the allocation they are filled from, and config-time launcher/cluster errors."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SCRIPTS, tiny_config
from scalebench import backends, environments
from scalebench import config as sb_config
from scalebench.cluster.slurm import Allocation, port_for_job
from scalebench.launch.launcher import (
    LaunchError,
    build_command,
    launch_processes,
    local_allocation,
    placeholders,
    rank_environment,
    step_wait,
    without_agent,
)

SRUN = "srun --kill-on-bad-exit=1 --nodes={nodes} --ntasks={ranks} --ntasks-per-node={ranks_per_node} --cpus-per-task={cpus_per_rank} {python} {program}"
TORCH = environments.resolve("torch")  # the install's torch environment


def slurm(hosts, cpus=8):
    return Allocation("slurm", hosts, "10.0.0.1", port_for_job("4711"), cpus)


def test_srun_command_spells_out_the_task_geometry():
    command = build_command(SRUN, 8, slurm(["gpu01", "gpu02"]), ["--out", "x y"], TORCH)
    argv = shlex.split(command)
    assert argv[:6] == [
        "srun",
        "--kill-on-bad-exit=1",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
    ]
    assert argv[-2:] == ["--out", "x y"]


def test_horovod_hosts_come_from_the_allocation_and_uneven_cells_fill_nodes_in_order():
    values = placeholders(10, slurm(["gpu01", "gpu02", "gpu03"]), "train.py", TORCH)
    assert values["hosts"] == "gpu01:4,gpu02:4,gpu03:2" and values["ranks_per_node"] == 4


def test_single_node_allocation_runs_horovod_ranks_locally_without_ssh():
    assert placeholders(4, slurm(["gpu07"]), "train.py", TORCH)["hosts"] == "localhost:4"


def test_more_nodes_than_ranks_is_an_error():
    with pytest.raises(LaunchError, match="2 nodes"):
        placeholders(1, slurm(["a", "b"]), "train.py", TORCH)


def test_a_foreign_allocation_that_would_leave_a_node_empty_is_an_error():
    with pytest.raises(LaunchError, match="empty"):
        placeholders(5, slurm(["a", "b", "c", "d"]), "train.py", TORCH)


def _problems(schema, **sections) -> str:
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate(tiny_config(**sections), schema)
    return str(error.value)


def test_unknown_launcher_placeholder_is_rejected_with_its_key(schema):
    message = _problems(schema, launchers={"slurm": {"torch_native": "srun -n {tasks} {python} {program}"}})
    assert "launchers.slurm.torch_native" in message and "{tasks}" in message


def test_gres_template_without_n_is_rejected(schema):
    assert "cluster.gres" in _problems(schema, cluster={"gres": "gpu:a100:4"})


def test_more_gpus_than_the_cluster_allows_is_rejected(schema):
    message = _problems(schema, matrix={"gpus": [1, 16]}, cluster={"max_gpus": 8})
    assert "matrix.gpus" in message and "max_gpus" in message


def test_uneven_placement_is_rejected_unless_allowed(schema):
    sections = {"matrix": {"gpus": [10]}, "dataset": {"synthetic": {"count": 200, "size": [48, 64]}}}
    message = _problems(schema, cluster={"gpus_per_node": 4}, **sections)
    assert "10 GPUs cannot be spread evenly over 3 nodes" in message and "allow_uneven" in message
    sb_config.validate(tiny_config(cluster={"gpus_per_node": 4, "allow_uneven": True}, **sections), schema)


def test_ranks_learn_whether_their_cell_runs_on_slurm():
    slurm = Allocation("slurm", ["n1", "n2"], "10.0.0.1", 12345, 4)
    assert rank_environment(4, slurm, TORCH)["SCALEBENCH_EXECUTOR"] == "slurm"
    assert rank_environment(1, local_allocation(), TORCH)["SCALEBENCH_EXECUTOR"] == "local"


def test_task_binding_tells_srun_the_gpus_of_each_task(monkeypatch):
    # the jobstep plugin removed the job's SLURM_* variables: srun reads --gpus-per-task from this one
    monkeypatch.delenv("SLURM_GPUS_PER_TASK", raising=False)
    slurm = Allocation("slurm", ["n1"], "10.0.0.1", 12345, 4)
    assert rank_environment(4, slurm, TORCH, gpus_per_task=2)["SLURM_GPUS_PER_TASK"] == "2"
    assert "SLURM_GPUS_PER_TASK" not in rank_environment(4, slurm, TORCH)  # node binding: every task sees its node's
    assert "SLURM_GPUS_PER_TASK" not in rank_environment(1, local_allocation(), TORCH, gpus_per_task=1)


def test_every_srun_of_a_slurm_cell_waits_at_most_step_wait_s_to_start(schema):
    # srun --immediate (test_slurm_stuck.py shows what it does on SLURM); SLURM 22.05 reads no SLURM_IMMEDIATE
    program = ["--settings", "{}"]
    for kind, template in backends.LAUNCH_TEMPLATES["slurm"].items():
        command = build_command(template, 2, slurm(["n1"]), program, TORCH, step_wait_s=42.5)
        assert "srun --immediate=43 " in command, (kind, command)
        assert "srun --immediate=300 " in build_command(template, 2, slurm(["n1"]), program, TORCH)  # the default
    assert step_wait(0.2) == 1  # srun's least


def default_templates(schema) -> dict:
    """The launchers of a config that sets none (the schema's defaults, from the registry)."""
    return backends.default_launchers()


@pytest.mark.parametrize(("framework", "backend"), [("torch", "dp"), ("tensorflow", "mirrored")])
def test_one_process_backends_start_one_process_for_all_the_cells_devices(schema, framework, backend):
    templates = default_templates(schema)
    processes = launch_processes(framework, backend, 4, slurm(["gpu01"], cpus=32))
    assert processes == 1
    environment = environments.resolve(framework)
    local = build_command(templates["local"][f"{framework}_{backend}"], processes, local_allocation(), [], environment)
    assert shlex.split(local)[1].endswith("train.py") and "torch.distributed.run" not in local
    assert shlex.split(local)[0] == str(environments.installed_python(framework))
    slurm_template = templates["slurm"][f"{framework}_{backend}"]
    on_slurm = build_command(slurm_template, processes, slurm(["gpu01"], cpus=32), [], environment)
    assert "--nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=32" in on_slurm


def test_fsdp_starts_one_process_per_gpu(schema):
    assert launch_processes("torch", "fsdp", 4, slurm(["gpu01"])) == 4
    command = build_command(default_templates(schema)["local"]["torch_fsdp"], 4, local_allocation(), [], TORCH)
    assert "--nproc-per-node=4" in command


def test_one_rank_of_the_default_torchrun_template_starts_without_torchrun_and_own_templates_stay(schema):
    local, on_slurm = default_templates(schema)["local"], default_templates(schema)["slurm"]
    for key, launcher in (
        ("torch_native", "-m torch.distributed.run"),
        ("torch_fsdp", "-m torch.distributed.run"),
        ("tensorflow_native", "local_ranks.py"),
    ):
        environment = environments.resolve(key.split("_")[0])
        alone = shlex.split(
            build_command(without_agent(local[key], "local", 1), 1, local_allocation(), [], environment)
        )
        assert alone[0] == environment.python and alone[1].endswith("train.py"), alone
        two = build_command(without_agent(local[key], "local", 2), 2, local_allocation(), [], environment)
        assert two.startswith(f"{environment.python} ") and launcher in two, two
        assert re.search(r"(--nproc-per-node=|--ranks )2 ", two), two
        assert without_agent(on_slurm[key], "slurm", 1) == on_slurm[key]  # srun's task is the rank
    own = "numactl --cpunodebind=0 " + local["torch_native"]
    assert without_agent(own, "local", 1) == own
    assert without_agent(local["torch_horovod"], "local", 1) == local["torch_horovod"]


def test_a_one_process_backend_refuses_an_allocation_of_several_nodes():
    with pytest.raises(LaunchError, match=r"dp drives the devices of one node from one process, .* 2 nodes"):
        launch_processes("torch", "dp", 8, slurm(["gpu01", "gpu02"]))
    with pytest.raises(LaunchError, match="fsdp is not a backend of tensorflow"):
        launch_processes("tensorflow", "fsdp", 2, slurm(["gpu01"]))


def signalled_launch(tmp_path: Path, body: str, run_arguments: str = "") -> subprocess.CompletedProcess:
    """launcher.run of `sh launcher.sh` (`body`, then a touch of ready), sent SIGTERM once the
    launcher is ready: its exit code and output."""
    ready = tmp_path / "ready"
    script = tmp_path / "launcher.sh"
    script.write_text(body.replace("READY", f"touch {ready}"))
    launcher = f"sh {script}"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from scalebench.launch.launcher import run; sys.exit(run({launcher!r}, {{}}{run_arguments}))",
        ],
        env={"PYTHONPATH": str(SCRIPTS), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # run() installs its handlers right after the launcher starts
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, out)


def test_a_launch_stopped_by_sigterm_fails_even_where_its_launcher_exits_0(tmp_path):
    # a launcher that, like horovodrun, ends quietly on SIGTERM: the job must not end ok with its cell unfinished
    ended = signalled_launch(tmp_path, "trap 'exit 0' TERM\nREADY\nwhile true; do sleep 0.1; done\n")
    assert ended.returncode == 128 + signal.SIGTERM, ended.stdout
    assert "stopped by signal 15; the launcher exited 0 all the same" in ended.stdout


def test_an_image_puts_every_default_template_inside_it_and_a_python_of_ones_own_is_used(schema):
    """environments.<framework>.image: locally the launcher and its ranks run inside the image, under
    SLURM each of srun's tasks (and Horovod's rendezvous) does; {python} is then the image's."""
    templates = default_templates(schema)
    image = environments.resolve("tensorflow", {"image": "/images/tf 2.21.sif"})
    assert image.python == "python3" and image.image == "/images/tf 2.21.sif"
    entered = ["apptainer", "exec", "--nv", "--bind", str(environments.REPOSITORY), "/images/tf 2.21.sif"]
    assert list(image.container) == entered
    for key in ("tensorflow_native", "tensorflow_horovod", "tensorflow_mirrored"):
        local = shlex.split(
            build_command(
                templates["local"][key], 2 if key != "tensorflow_mirrored" else 1, local_allocation(), [], image
            )
        )
        assert local[: len(entered) + 1] == [*entered, "python3"], local
        assert local.count("apptainer") == 1  # the launcher's ranks are already inside
        on_slurm = shlex.split(build_command(templates["slurm"][key], 1, slurm(["gpu01"]), [], image))
        assert on_slurm[on_slurm.index("--cpus-per-task=8") + 1 :][: len(entered) + 1] == [*entered, "python3"]
    own = environments.resolve(
        "torch", {"image": "t.sif", "python": "/opt/conda/bin/python", "container": "singularity exec --nv {image}"}
    )
    assert own.command == ["singularity", "exec", "--nv", "t.sif", "/opt/conda/bin/python"]
    elsewhere = environments.resolve("torch", {"python": "/apps/torch/bin/python"})
    assert elsewhere.command == ["/apps/torch/bin/python"] and not elsewhere.container
    assert rank_environment(1, local_allocation(), elsewhere)["PATH"].startswith("/apps/torch/bin:")
    assert rank_environment(1, local_allocation(), image)["PATH"] == os.environ["PATH"]  # the image's own PATH


def test_local_ranks_starts_each_rank_with_torchruns_variables_and_a_failed_rank_ends_the_others(tmp_path):
    """TensorFlow's local multi-worker launcher (workflow/scripts/local_ranks.py): torchrun's variables
    for each process; a rank that fails ends the others (which would sleep for ten minutes: gone by
    the time the launcher returns) and its exit code is the launcher's."""
    rank = (
        "import os, sys, time; r = int(os.environ['RANK']); e = os.environ; "
        "line = [os.getpid(), r, e['LOCAL_RANK'], e['WORLD_SIZE'], e['MASTER_ADDR'], e['MASTER_PORT']]; "
        "os.write(1, (' '.join(map(str, line)) + chr(10)).encode()); "
        "sys.exit(3) if r == 1 and len(sys.argv) > 1 else time.sleep(600 if len(sys.argv) > 1 else 0)"
    )
    launcher = [sys.executable, str(SCRIPTS / "local_ranks.py"), "--ranks", "3", "--master-addr", "127.0.0.2"]
    command = [*launcher, "--master-port", "29611", sys.executable, "-c", rank]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    said = [line.split(maxsplit=1) for line in ran.stdout.splitlines()]
    assert sorted(rest for _, rest in said) == [f"{r} {r} 3 127.0.0.2 29611" for r in range(3)]
    marker = f"fail-{tmp_path.name}"  # in every rank's command line: found in /proc while one runs
    failed = subprocess.run([*command, marker], capture_output=True, text=True, timeout=300)
    assert failed.returncode == 3, failed.stderr

    def running() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if marker.encode() in cmdline.read_bytes():
                    found.append(cmdline.parent.name)
            except OSError:  # ended while read
                pass
        return found

    assert running() == []


def test_a_launcher_that_does_not_end_after_the_signal_is_killed_with_its_ranks(tmp_path):
    # torchrun's agent can wedge in its own shutdown: locally no SLURM KillWait would end the job,
    # and the study would wait for it for ever
    body = f"trap '' TERM\nsleep 600 &\necho $! > {tmp_path / 'rank'}\nREADY\nwait\n"
    ended = signalled_launch(tmp_path, body, ", grace_s=2")
    assert ended.returncode == 128 + signal.SIGTERM, ended.stdout
    assert "had not ended 2 s after signal 15: killed with its ranks" in ended.stdout
    rank = Path(f"/proc/{int((tmp_path / 'rank').read_text())}/stat")
    assert not rank.exists() or rank.read_text().split(") ")[1].startswith("Z"), "the rank outlived its launcher"


def test_the_placeholders_a_template_may_name_are_those_the_launcher_fills():
    from scalebench.config import checks

    assert set(placeholders(1, local_allocation(), "train.py", TORCH)) == set(checks.LAUNCHER_PLACEHOLDERS)
