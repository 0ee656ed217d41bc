"""model.width on real ranks and through the workflow: both frameworks train the wider UNet and
record it, a width that cannot fit is refused before the model is built, and a study over
matrix.model_width with fixed steps runs to the report with the regimes' tables and figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import assert_refused, cell_settings, launch_cell, made_once, read_records, run_snakemake, tiny_config
from paired_cells import study_data
from scalebench import architecture
from scalebench.train import flops

pytestmark = pytest.mark.integration


def with_width(framework: str, backend: str, gpus: int, width: int, **training) -> dict:
    settings = cell_settings(framework, backend, gpus, epochs=1, checkpoint_every=0, predictions=0, **training)
    settings["model"] = {"width": width}
    return settings


# what the tests read of the widths study: its tables and the two figures of the regimes (the drawing
# rules plot_collectives and plot_scaling), not the training curves, predictions, hosts or bill
WIDTHS_READ = (
    "results/summary/epochs.csv",
    "results/tables/collectives.html",
    "results/figures/collective_bandwidth.png",
    "results/figures/efficiency_gradient.png",
)


def widths_study(tmp_path_factory) -> Path:
    """A study over matrix.model_width [1, 2] on torch's 1 and 2 ranks with fixed steps, run by the
    workflow to the tables and figures the tests read (WIDTHS_READ) once per test run, for the tests that read it (made_once)."""

    def make(folder: Path) -> None:
        # one epoch, no checkpoint and no prediction images: the tables and figures read none of them
        config = tiny_config(
            matrix={"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2], "model_width": [1, 2]},
            training={"epochs": 1, "steps_per_epoch": 4, "eval_every": 0, "checkpoint_every": 0, "predictions": 0},
            cluster={"link_gbps": {"intra_node": 50}},
        )
        study_data(tmp_path_factory, folder, config)  # the prepared data, made once by the workflow
        result = run_snakemake(folder, config, "--cores", "2", *WIDTHS_READ)
        assert result.returncode == 0, result.stderr[-3000:]

    return made_once(tmp_path_factory, "model-width-study", make)


@pytest.mark.parametrize(("framework", "gpus"), [("torch", 2), ("tensorflow", 1)])
def test_both_frameworks_train_the_wider_unet_and_record_it(prepared_data, tmp_path_factory, tmp_path, framework, gpus):
    if framework == "torch":  # the widths study's cell of width 2 on two ranks, as the train rule ran it
        out = widths_study(tmp_path_factory) / "results" / "runs" / "torch" / "native" / "width2" / "g2" / "s1"
    else:
        result = launch_cell(with_width(framework, "native", gpus, 2), prepared_data, tmp_path)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        out = tmp_path
    epochs, final, run = read_records(out)
    assert final["status"] == "ok" and run["model_width"] == 2
    assert run["parameters"] == architecture.parameter_count(2) and run["gradient_bytes"] == 4 * run["parameters"]
    assert run["model_flops_per_image"] == flops.train_flops_per_image(32, 48, architecture.channels(2))
    assert run["settings"]["model"] == {"width": 2}


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_width_that_cannot_fit_the_device_is_refused_before_the_model_is_built(prepared_data, tmp_path, framework):
    # width 300: 4.4e10 parameters, 700 GB of weights, gradients and Adam's moments: more than any rank here
    result = launch_cell(with_width(framework, "native", 1, 300), prepared_data, tmp_path)
    count = f"{architecture.parameter_count(300):,}"
    assert_refused(result, tmp_path, f"model.width = 300: the UNet's {count} parameters and a batch of 4 need")
    assert "GiB free on the fullest device of the cell" in result.stdout + result.stderr


def test_a_study_over_model_widths_with_fixed_steps_runs_to_the_report(tmp_path_factory):
    study = widths_study(tmp_path_factory)
    summary = study / "results" / "summary"
    runs = pd.read_csv(summary / "runs.csv", keep_default_na=False).set_index(["variant", "gpus"])
    assert sorted(runs.index) == [("width1", 1), ("width1", 2), ("width2", 1), ("width2", 2)]
    assert set(runs["status"]) == {"ok"} and set(runs["steps_per_epoch"]) == {4}
    assert runs.loc[("width2", 1), "parameters"] == architecture.parameter_count(2)
    assert runs.loc[("width2", 2), "gradient_bytes"] == 4 * architecture.parameter_count(2)
    assert float(runs.loc[("width2", 2), "collective_busbw_gbps"]) > 0
    assert runs.loc[("width1", 1), "collective_busbw_gbps"] == ""  # one GPU: not measured, not zero
    assert runs.loc[("width1", 1), "collective_reason"] == "one replica: nothing to exchange"
    epochs = pd.read_csv(summary / "epochs.csv")
    assert set(epochs.loc[epochs["gpus"] == 2, "images"]) == {2 * 4 * 4}  # two replicas, four steps of four
    collectives = pd.read_csv(summary / "collectives.csv", keep_default_na=False)
    assert set(collectives["variant"]) == {"width1", "width2"} and set(collectives["gpus"]) == {2}
    gradient = collectives[collectives["size"] == "gradient"].set_index("model_width")["bytes"]
    assert gradient[2] - 4 * architecture.parameter_count(2) in (0, 4)  # whole elements over two ranks
    table = (study / "results" / "tables" / "collectives.html").read_text()
    assert "torch.distributed gloo" in table and "width2" in table
    figures = study / "results" / "figures"
    for name in ("collective_bandwidth", "efficiency_gradient"):
        assert (figures / f"{name}.png").stat().st_size > 20_000, name  # drawn, not a placeholder's few KB
