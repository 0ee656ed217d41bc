"""Cells trained once per test run and read by every test that asks for the same settings.

A cell is named by a hash of its settings, so two tests share a cell only where they would have
trained exactly the same one (same framework, backend, ranks and training section): the tests that
compare two modes (test_data_placement, test_compiled_steps, test_torch_backends' FSDP against DDP
and dp against one DDP rank) and the tests that read what any cell of those settings records
(test_collectives, test_observed_steps, test_network_interface, test_torch_training) train it once
between them. Each test still asserts on its own, and alone (`pytest path::name`) it trains the
cell itself.

The trainings that tests of several modules read live here too, so that no test module imports
another (pytest would collect the imported module's tests and fixtures a second time in the
importer's namespace): test_resume.py's interrupted and resumed cells (RESUMED_CELLS, read by
test_framework_isolation.py, its DDP reference by test_tensorboard.py and test_steps_per_epoch.py)
and test_tf_training.py's MultiWorkerMirrored reference runs (read by the same two and
test_framework_isolation.py) and attempt with a killed worker (taken on by test_resume.py's
agreement test too).

A cell is shared within one pytest session (made_once: the run's folder), so the modules that read
these cells run in one, the pipeline's: they start cells as the train rule does (launch.py, each
cell's ranks in its framework's environment) and read what the cells wrote, importing no framework.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import (
    cell_settings,
    checkpoint_epoch,
    copy_study,
    launch_cell,
    made_once,
    rank_command,
    rank_pids,
    run_snakemake,
    start_cell,
    tiny_config,
    tool_env,
    wait_for,
)

# the collective benchmark of the multi-rank cells that test_collectives reads: a short one, with room
# for FSDP's three operations at the gradient's size
COLLECTIVES = {"budget_s": 1.5, "max_bytes": 2**20, "iterations": 3, "warmup": 1}
# no benchmark, for the cells whose benchmark nothing reads: it spins its whole budget on every rank
UNMEASURED = {**COLLECTIVES, "budget_s": 0}
# a rate that changes between epochs (test_observed_steps), for every one-rank PyTorch cell here
SCHEDULE = {"epochs": 2, "decay_every": 1, "decay_factor": 0.5}


def placed(
    framework: str, backend: str, gpus: int, placement: str, collectives: dict = COLLECTIVES, **training: object
) -> dict:
    """A cell of test_data_placement: two epochs, validation after each, the samples at `placement`
    (with `training`'s other keys: test_compiled_steps' compiled TensorFlow cells)."""
    loader = {"workers": 0, "placement": placement}
    return cell_settings(
        framework, backend, gpus, epochs=2, eval_every=1, loader=loader, collectives=collectives, **training
    )


def unmeasured_over_loopback() -> dict:
    """test_data_placement's two-rank DDP host cell, over the loopback interface (cluster.network_interface)
    with a collective benchmark of no budget: test_data_placement compares its figures with the device
    cell's, test_network_interface reads how it trained, test_collectives what a budget of nothing records."""
    settings = placed("torch", "native", 2, "host", collectives=UNMEASURED)
    return {**settings, "network_interface": "lo"}


def trained_once(tmp_path_factory: pytest.TempPathFactory, settings: dict, data: Path, timeout: float = 600) -> Path:
    """The folder of the cell of `settings`, trained on `data` as the train rule runs it, once per run."""
    text = json.dumps({"settings": settings, "data": str(data)}, sort_keys=True)
    cell, digest = settings["cell"], hashlib.sha256(text.encode()).hexdigest()[:12]
    name = f"cell-{cell['framework']}-{cell['backend']}-g{cell['gpus']}-{digest}"

    def make(folder: Path) -> None:
        (folder / "settings.json").write_text(text)
        result = launch_cell(settings, data, folder / "out", timeout=timeout)
        (folder / "output.txt").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, name, make) / "out"


def job_beyond_ranks(run: dict) -> float:
    """Seconds launch.py's job wall (job_s, from its own process's start) holds beyond rank 0's
    run.json start to end: the ranks' imports and start, the same span for a cell of one rank
    started directly and one torchrun or horovodrun starts."""
    from datetime import datetime

    ranks = (datetime.fromisoformat(run["end"]) - datetime.fromisoformat(run["start"])).total_seconds()
    assert run["job_s_source"] == "launch" and run["job_s_reason"] is None, run
    return run["job_s"] - ranks


def launch_output(out: Path) -> str:
    """What the launcher and the ranks of the cell trained_once put in `out` printed (stdout, then stderr)."""
    return (out.parent / "output.txt").read_text()


def study_data(tmp_path_factory: pytest.TempPathFactory, workdir: Path, config: dict) -> Path:
    """`config`'s dataset as the workflow prepares it (its dataset jobs, prepared_data), once per run
    for every study of the same dataset section, copied into `workdir`'s results/data with its files'
    dates (copy_study): a study of that dataset there finds it up to date, and only trains and analyses."""
    dataset = {"dataset": config.get("dataset", {})}
    digest = hashlib.sha256(json.dumps(dataset, sort_keys=True).encode()).hexdigest()[:12]

    def make(folder: Path) -> None:
        result = run_snakemake(folder, tiny_config(**dataset), "--cores", "1", "prepared_data")
        assert result.returncode == 0, result.stderr[-3000:]

    made = made_once(tmp_path_factory, f"study-data-{digest}", make)
    return copy_study(made / "results" / "data", workdir / "results" / "data")


# --- test_resume.py's cells, interrupted after a checkpoint and resumed

# A collective timeout far beyond launch_cell's limit, for the DDP cell whose next attempt has a rank
# that cannot load the checkpoint: a rank left waiting would hang the test past that limit instead
# of failing it by timeout, so only the agreement check can end it.
NEVER = {"collective_timeout_s": 3600}
# the PyTorch DDP cell writes curves with validation each epoch (test_tensorboard.py reads its
# reference), in ten steps per epoch, more than a pass over a rank's shard of 14 pairs (test_steps_per_epoch.py)
CURVES = {"tensorboard": True, "eval_every": 1, "steps_per_epoch": 10, **NEVER}
# (framework, backend, gpus, extra training settings): the smallest cell of each backend that
# has several ranks or replicas where the CPU allows (dp drives one device without GPUs); extra
# None: test_data_placement's device cell (placed), whose reference it trains anyway
RESUMED_CELLS = [
    # the resumed run rewrites the curves too; its first attempt serves the agreement test as well
    ("torch", "native", 2, CURVES),
    ("torch", "horovod", 2, None),
    ("torch", "dp", 1, None),
    ("tensorflow", "horovod", 2, None),
    ("tensorflow", "mirrored", 2, None),
]
RESUMED_IDS = [f"{f}-{b}" for f, b, _, _ in RESUMED_CELLS]
EPOCHS = 2


def resumable_settings(framework: str, backend: str, gpus: int, extra: dict | None) -> dict:
    """EPOCHS epochs with a checkpoint after each (placed's cells: two, and the default checkpoint_every)."""
    if extra is None:
        settings = placed(framework, backend, gpus, "device")
    else:
        settings = cell_settings(framework, backend, gpus, epochs=EPOCHS, checkpoint_every=1, **extra)
    assert (settings["training"]["epochs"], settings["training"]["checkpoint_every"]) == (EPOCHS, 1)
    return settings


def stale_curves(out: Path) -> Path:
    """An earlier run's event file in the folder of a cell about to train (a retrained cell starts fresh)."""
    stale = out / "tensorboard" / "events.out.tfevents.1.an-earlier-run"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"")
    return stale


def uninterrupted_run(tmp_path_factory: pytest.TempPathFactory, data: Path, cell: tuple) -> Path:
    """The cell of RESUMED_CELLS trained to its end without interruption, once per test run for every
    test that asks: test_data_placement's cell where it is one, else test_resume.py's own, trained over
    an earlier run's curves (test_tensorboard.py reads that they are gone)."""
    framework, backend, gpus, extra = cell
    settings = resumable_settings(*cell)
    if extra is None:
        return trained_once(tmp_path_factory, settings, data)

    def make(folder: Path) -> None:
        stale_curves(folder / "cell")
        result = launch_cell(settings, data, folder / "cell")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, f"uninterrupted-{framework}-{backend}-{gpus}", make) / "cell"


def first_attempt(tmp_path_factory: pytest.TempPathFactory, data: Path, cell: tuple, out: Path) -> None:
    """A copy in `out` of the cell's first attempt, interrupted at the start of its last epoch after
    the checkpoint before it: made once per test run for every test that takes the cell on from
    there (the copy keeps the made one as it was); its output in first-attempt.txt beside `out`."""
    framework, backend, gpus, _ = cell

    def make(folder: Path) -> None:
        output = interrupt_after_checkpoint(resumable_settings(*cell), data, folder / "cell", framework, EPOCHS - 1)
        (folder / "launch.txt").write_text(output)

    made = made_once(tmp_path_factory, f"first-attempt-{framework}-{backend}-{gpus}", make)
    shutil.copytree(made / "cell", out, symlinks=True)
    shutil.copy(made / "launch.txt", out.parent / "first-attempt.txt")


def resumed_run(tmp_path_factory: pytest.TempPathFactory, data: Path, cell: tuple) -> Path:
    """The cell of RESUMED_CELLS taken on from its first attempt to its end, once per test run for
    every test that asks (test_resume.py's, test_framework_isolation.py's): the cell's folder, both
    attempts' output in first-attempt.txt and launch.txt."""
    framework, backend, gpus, _ = cell

    def make(folder: Path) -> None:
        first_attempt(tmp_path_factory, data, cell, folder / "cell")
        result = launch_cell(resumable_settings(*cell), data, folder / "cell")
        (folder / "launch.txt").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, f"resumed-{framework}-{backend}-{gpus}", make) / "cell"


def interrupt_after_checkpoint(settings: dict, data: Path, out: Path, framework: str, epoch: int) -> str:
    """A first attempt that stops at the start of epoch `epoch` + 1, after `epoch`'s checkpoint,
    ended by SIGTERM to its launcher; no rank is left behind. Its output."""
    process = start_cell(settings, data, out, SCALEBENCH_FAULT=f"stall:{epoch + 1}")
    try:  # (a cell that ends before its checkpoint ends the wait: its output says why)
        wait_for(lambda: checkpoint_epoch(out, framework) == epoch or process.poll() is not None, 300)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=120)  # the launcher kills a wedged torchrun after 40 s
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert checkpoint_epoch(out, framework) == epoch, f"no checkpoint after epoch {epoch}:\n{output[-3000:]}"
    assert process.returncode != 0
    assert wait_for(lambda: not rank_pids(out), 30), "ranks left behind"
    return output


# --- test_tf_training.py's MultiWorkerMirrored reference runs

# Two compute threads per worker: what the mirrored backend's one process gives each of its two
# replicas, so that its run and the MultiWorkerMirrored reference sum alike (oneDNN's CPU kernels
# sum in an order that depends on the intra-op thread count: 1 against 2 threads moves the fourth
# epoch's loss by percents) and one pair of reference runs serves every test of test_tf_training.py.
# Each epoch 14 steps, four passes over a worker's shard of 14 pairs (long enough to interrupt between
# two checkpoints), cycled in its seeded order: test_steps_per_epoch.py reads that two workers took
# them. The curves with validation each epoch: test_tensorboard.py reads the first reference run's.
LEARN = {"epochs": 4, "steps_per_epoch": 14, "threads_per_rank": 2, "eval_every": 1, "tensorboard": True}


def multiworker_settings() -> dict:
    """The settings of the MultiWorkerMirrored reference cell (and of its killed worker's attempt)."""
    return cell_settings("tensorflow", "native", 2, seed=3, **LEARN)


def multiworker_reference(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    """One two-worker MultiWorkerMirrored run (uninterrupted) of multiworker_settings(), made once per
    test run for the tests that read it (the horovod and mirrored backends' reference, the resumed
    run's, test_tensorboard.py's curves over an earlier run's, test_steps_per_epoch.py's steps,
    test_framework_isolation.py's launch of TensorFlow's workers: its output in output.txt beside it),
    whichever xdist worker runs each (a module-scoped fixture would train it again in every worker).
    That the same settings train to the same figures twice is asserted where a second run is trained
    anyway: test_data_placement's two-worker cells, device against host, bit for bit, and the killed
    worker's attempt of these settings, whose two epochs and resumed end agree with this run to 1e-6."""

    def make(root: Path) -> None:
        stale_curves(root / "cell")
        result = launch_cell(multiworker_settings(), data, root / "cell")
        (root / "output.txt").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, "tf-native-reference-run", make) / "cell"


# the checkpoint in force when the killed worker dies: two of LEARN's four epochs
KILLED_AFTER = 2


def start_workers(settings: dict, data: Path, out: Path) -> list[subprocess.Popen]:
    """Both workers without a supervising launcher (local_ranks.py would kill the survivor itself):
    what remains to stop the survivor is TensorFlow's own failure detection."""
    from scalebench.cluster import ports

    port = ports.reserve_local_block()  # held by this test process while the workers run
    workers = []
    for rank in range(2):
        env = tool_env(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            TF_USE_LEGACY_KERAS="1",
            TF_NUM_INTEROP_THREADS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        command = rank_command(settings, data, out)
        workers.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return workers


def killed_worker_attempt(tmp_path_factory: pytest.TempPathFactory, data: Path, out: Path) -> dict:
    """A copy in `out` of an attempt of the MultiWorkerMirrored reference cell (multiworker_settings)
    whose worker 1 died hard once the checkpoint after epoch KILLED_AFTER was in force (a node lost),
    both workers started without a launcher, no worker left behind; made once per test run for
    test_tf_training.py's killed-worker test (which resumes its copy) and test_resume.py's agreement
    test (whose next attempt hides that checkpoint from rank 1). What the survivor did, for the test
    to judge: {"returncode": None where it still ran collective_timeout_s + 90 s after the kill, "output"}."""
    settings = multiworker_settings()
    timeout_s = settings["training"]["collective_timeout_s"]

    def make(folder: Path) -> None:
        cell = folder / "cell"
        survivor, victim = start_workers(settings, data, cell)
        returncode = output = None
        try:
            assert wait_for(lambda: checkpoint_epoch(cell, "tensorflow") == KILLED_AFTER, 300), "no checkpoint"
            victim.kill()
            try:  # the survivor fails on its own, within the collective timeout plus a margin (not by hanging)
                output, _ = survivor.communicate(timeout=timeout_s + 90)
                returncode = survivor.returncode
            except subprocess.TimeoutExpired:
                pass
        finally:
            for worker in (survivor, victim):
                if worker.poll() is None:
                    worker.kill()
                worker.wait()
        if output is None:  # killed above: what it printed until then
            output, _ = survivor.communicate()
        assert wait_for(lambda: not rank_pids(cell), 10), "workers left behind"
        (folder / "survivor.json").write_text(json.dumps({"returncode": returncode, "output": output}))

    made = made_once(tmp_path_factory, "tf-native-killed-worker", make)
    shutil.copytree(made / "cell", out, symlinks=True)
    return json.loads((made / "survivor.json").read_text())


def two_rank_native_cell(tmp_path_factory: pytest.TempPathFactory, data: Path, framework: str) -> Path:
    """The folder of the framework's two-rank native cell with curves, validation and steps_per_epoch
    that another test trains anyway, once per run (test_tensorboard.py and test_steps_per_epoch.py
    read it): test_resume.py's uninterrupted DDP reference, or MultiWorkerMirrored's reference run."""
    if framework == "torch":
        return uninterrupted_run(tmp_path_factory, data, RESUMED_CELLS[0])
    return multiworker_reference(tmp_path_factory, data)
