"""run.json's training record: every setting a cell trained with, as the cell resolved it (each
framework's backends' records: test_provenance_torch.py, test_provenance_tensorflow.py), and the commit."""

from __future__ import annotations

from conftest import SCRIPTS, cell_settings, repository_head
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import provenance

TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def settings(framework: str, backend: str, replicas: int, **training) -> RunSettings:
    return RunSettings.from_json(cell_settings(framework, backend, replicas, **training), "data", "out")


def record_of(run: RunSettings, backend) -> dict:
    framework, replicas = run.cell.framework, run.cell.gpus
    return provenance.training_record(
        run.training,
        framework=framework,
        device_type="cpu",
        replicas=replicas,
        threads=ProcessFacts.of_rank(run, {}).threads,
        deterministic=True,
        passes=backend.backward_passes_per_step,
        compression=backend.gradient_compression,
        backend_options=backend.options(),
    )


def test_a_one_process_backend_gets_the_threads_of_every_device_it_drives():
    # threads_per_rank is 1 in tiny_config: the mirrored process drives 2 replicas
    assert ProcessFacts.of_rank(settings("tensorflow", "mirrored", 2), {}).threads == 2
    assert ProcessFacts.of_rank(settings("tensorflow", "native", 2), {}).threads == 1
    slurm = RunSettings.from_json(cell_settings("tensorflow", "mirrored", 2, threads_per_rank=None), "d", "o")
    # the task's CPUs: config/resources.py gave it those of both devices
    assert ProcessFacts.of_rank(slurm, {"SLURM_CPUS_PER_TASK": "6"}).threads == 6


def test_the_commit_is_the_checkouts_head_and_a_dirty_tree_says_so():
    assert provenance.git_commit(SCRIPTS / "scalebench") == (repository_head(), None)


def test_outside_a_checkout_or_without_git_the_commit_is_empty_with_the_reason(tmp_path, monkeypatch):
    commit, reason = provenance.git_commit(tmp_path)
    assert commit is None and reason.startswith(f"not a git checkout: {tmp_path} (git rev-parse: fatal:")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on this node's PATH
    assert provenance.git_commit(tmp_path) == (None, "git is not installed where the rank ran")
