"""Every figure renders: a one-cell study, a study with nothing finished, imported rows; NaN is never drawn."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
from cell_records import cell, rank_rows, write_cell
from conftest import REPO
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from PIL import Image
from plotnine import aes, geom_point, ggplot
from scalebench.analysis import collect as analysis
from scalebench.analysis import collectives as collectives_table
from scalebench.analysis import study as summary
from scalebench.analysis.drift import drift_table, order_table, read_drift, read_order
from scalebench.analysis.hosts import host_table, read_hosts
from scalebench.analysis.ranks import collect_ranks
from scalebench.analysis.scaling import scaling
from scalebench.analysis.summary_csv import read_epochs, read_runs
from scalebench.cell import Cell
from scalebench.records.tables import CELL_COLLECTIVES
from scalebench.report import scaling_figures as plots
from scalebench.report.figures import FIGURES, RULE_INPUTS, FigureInputs, figures_of
from scalebench.report.predictions import picture_panel
from scalebench.report.saving import save_figure
from scalebench.rerun import Invocation
from scalebench.train.collectives import bandwidths, empty_row, write_table


def all_figures(runs, epochs, target=0.8, folder=None, collectives=None) -> dict:
    """Every figure the report registers, drawn as its rule draws it (the picture panel only where
    a folder of cells is given)."""
    inputs = FigureInputs(
        runs=runs,
        scaling=scaling(runs),
        epochs=epochs,
        target_iou=target,
        runs_root=folder,
        prepared=folder,
        collectives=collectives,
    )
    return {
        figure.name: figure.draw(inputs) for figure in FIGURES if folder is not None or figure.rule != "predictions"
    }


def drawn_values(drawing: Figure) -> tuple[np.ndarray, int]:
    """The y values a drawn figure shows, in data coordinates, and how many shapes carry them: points,
    line vertices, and each polygon's extent and height (a stacked bar's height is its value)."""
    values, shapes = [], 0
    for axis in drawing.axes:
        for line in axis.lines:
            values.extend(np.asarray(line.get_ydata(), float))
            shapes += 1
        for collection in axis.collections:
            if isinstance(collection, PathCollection):
                offsets = np.asarray(collection.get_offsets(), float).reshape(-1, 2)
                values.extend(offsets[:, 1])
                shapes += len(offsets)
                continue
            for path in collection.get_paths():
                heights = path.vertices[:, 1]
                values.extend([*heights, heights.max() - heights.min()])
                shapes += 1
    return np.asarray(values, float), shapes


def assert_draws_its_data(name: str, figure) -> None:
    """A figure with rows draws them: each finite value of the column it maps to y appears among the
    drawn values (or its logarithm, on a log axis); a categorical y has a shape per row. The picture panel
    shows an image in every panel."""
    if isinstance(figure, Figure):
        images = [axis for axis in figure.axes if axis.images]
        assert images, f"{name}: no image drawn"
        return
    if figure.data is None or len(figure.data) == 0:
        return  # a placeholder: the tests of empty studies check it says why
    column = figure.data[figure.mapping["y"]]
    drawn, shapes = drawn_values(copy.deepcopy(figure).draw())  # a ggplot draws once: save it afterwards
    assert shapes, f"{name}: nothing drawn"
    if not pd.api.types.is_numeric_dtype(column):
        assert shapes >= len(column), f"{name}: {shapes} shapes for {len(column)} rows"
        return
    for value in column[np.isfinite(column)]:
        candidates = [value, math.log10(value), math.log2(value)] if value > 0 else [value]
        assert any(np.isclose(drawn, c, rtol=1e-6, atol=1e-9).any() for c in candidates), (
            f"{name}: {figure.mapping['y']} = {value} is not drawn"
        )


def render(figures: dict, folder) -> None:
    for name, figure in figures.items():
        assert_draws_its_data(name, figure)
        path = folder / f"{name}.png"
        save_figure(figure, path)
        width, height = Image.open(path).size
        assert width > 300 and height > 150, name


def through_csv(runs, epochs, folder):
    """The scripts read the tables back from CSV: test the same round trip."""
    runs.to_csv(folder / "runs.csv", index=False)
    epochs.to_csv(folder / "epochs.csv", index=False)
    return read_runs(folder / "runs.csv"), read_epochs(folder / "epochs.csv")


GRADIENT_BYTES = 1945636


def write_collectives(folder, gpus: int, sizes=(8, 1024, GRADIENT_BYTES, 2**20)) -> None:
    """A cell's collectives.csv as its rank 0 writes it, latencies that grow with the bytes."""
    rows = []
    for nbytes in sizes:
        latency = 50e-6 + nbytes / 10e9
        algbw, busbw = bandwidths("all_reduce", nbytes, latency, gpus)
        label = "gradient" if nbytes == GRADIENT_BYTES else "sweep"
        row = empty_row("all_reduce", nbytes, label, gpus, "torch.distributed gloo", None)
        row.update(iterations=3, latency_us=latency * 1e6, latency_min_us=latency * 1e6, latency_max_us=latency * 1e6)
        rows.append(row | {"algbw_gbps": algbw, "busbw_gbps": busbw})
    write_table(rows, folder / CELL_COLLECTIVES.name)


def test_a_single_cell_study_renders_every_figure(tmp_path):
    write_cell(tmp_path / "runs", epochs_extra={3: {"val_iou": 0.85}})
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", [cell()], 0.8), tmp_path)
    render(all_figures(runs, epochs), tmp_path)


def saved_predictions(folder, count: int = 8) -> None:
    """The prepared dataset's arrays and the test masks a finished cell saves."""
    (folder / "predictions").mkdir()
    for index in (3, 7):
        Image.fromarray(np.full((16, 24), 255, np.uint8)).save(folder / "predictions" / f"test_{index:05d}.png")


def host_tables(runs, cells, folder):
    """hosts.csv, drift.csv and order.csv of a study, read back as the drawing rule reads them."""
    ranks = collect_ranks(folder / "runs", cells)
    order = order_table(runs, ranks, cells, {"seed": 1, "blocks": False}, [1, 2, 3])
    tables = {"hosts": host_table(ranks, runs, Invocation(("snakemake",), "/w", ())), "order": order}
    tables["drift"] = drift_table(order, runs)
    for name, table in tables.items():
        table.to_csv(folder / f"{name}.csv", index=False)
    return read_hosts(folder / "hosts.csv"), read_drift(folder / "drift.csv"), read_order(folder / "order.csv")


def test_every_registered_figure_draws_the_study_it_is_given(tmp_path):
    cells = [
        cell(gpus=gpus, seed=seed, settings={"cell": Cell("torch", "native", gpus, seed).to_json()})
        for gpus in (1, 2, 4, 8)
        for seed in (1, 2, 3)
    ]
    for number, entry in enumerate(cells):
        gpus = entry["gpus"]  # weak scaling with a cost per reduction, so that the scaling model fits
        seconds = (100 + 2 * (gpus > 1) + 8 * (gpus - 1) / gpus) / gpus * (1 + 0.004 * entry["seed"])
        hosts = [f"n{(number + rank) % 4 + 1}" for rank in range(gpus)]  # several hosts, n3 the slow one
        ranks = {n: {"ranks": rank_rows(seconds, hosts, {"n3": 1.3})} for n in range(1, 5)}
        folder = write_cell(
            tmp_path / "runs",
            gpus=entry["gpus"],
            seed=entry["seed"],
            times=(2 * seconds, seconds, seconds, seconds),
            epochs_extra={**ranks, 3: {**ranks[3], "val_iou": 0.85}},
            run_extra={
                "nodes": 1,
                "hosts": sorted(set(hosts)),
                "model_width": 1,
                "gradient_bytes": GRADIENT_BYTES,
                "start": f"2030-01-01T{8 + number % 12:02d}:00:00+00:00",
            },
        )
        saved_predictions(folder)
        if gpus > 1:
            write_collectives(folder, gpus)
    np.save(tmp_path / "images.npy", np.zeros((8, 16, 24), np.uint8))
    np.save(tmp_path / "masks.npy", np.ones((8, 16, 24), np.uint8))
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", cells, 0.8), tmp_path)
    scaling(runs).to_csv(tmp_path / "scaling.csv", index=False)  # the drawing rule reads it back as it is
    inputs = FigureInputs(
        runs=runs,
        scaling=pd.read_csv(tmp_path / "scaling.csv"),
        epochs=epochs,
        runs_root=tmp_path / "runs",
        prepared=tmp_path,
        collectives=collectives_table.gather(tmp_path / "runs", cells),
        link_gbps={"intra_node": 300.0, "inter_node": None},
    )
    inputs.hosts, inputs.drift, inputs.order = host_tables(runs, cells, tmp_path)
    assert list(inputs.hosts.loc[inputs.hosts["slow_node"], "host"]) == ["n3"]
    figures = {figure.name: figure.draw(inputs) for figure in FIGURES}
    drawn = [name for name, figure in figures.items() if isinstance(figure, Figure) or figure.data is not None]
    assert sorted(drawn) == sorted(figure.name for figure in FIGURES)  # no placeholder among them
    render(figures, tmp_path)


def test_the_registry_names_each_figure_once_with_its_caption_and_rule():
    names = [figure.name for figure in FIGURES]
    assert len(names) == len(set(names))
    for figure in FIGURES:
        assert (REPO / figure.caption).is_file(), figure.caption
    assert sum(len(figures_of(rule)) for rule in RULE_INPUTS) == len(FIGURES)
    with pytest.raises(KeyError, match="no drawing rule 'plots'; the rules are scaling, training, predictions, col"):
        figures_of("plots")


def test_nothing_finished_gives_placeholders_not_crashes(tmp_path):
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", [cell(seed=1), cell(seed=2)]), tmp_path)
    figures = all_figures(runs, epochs)
    assert figures["completeness"].data["status"].tolist() == ["missing", "missing"]
    placeholders = [name for name, figure in figures.items() if figure.data is None or len(figure.data) == 0]
    assert len(placeholders) == len(figures) - 1  # all but the completeness grid say why they are empty
    render({k: figures[k] for k in ("speedup", "loss", "completeness")}, tmp_path)


def test_nan_values_are_left_out_not_drawn_as_zero(tmp_path):
    write_cell(tmp_path / "runs", seed=1)
    write_cell(tmp_path / "runs", seed=2, epochs_extra={n: {"images_per_s": None} for n in range(1, 5)})
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", [cell(seed=1), cell(seed=2)]), tmp_path)
    assert runs["images_per_s_per_gpu"].isna().sum() == 1
    figure = plots.throughput_figure(runs)
    assert len(figure.data) == 1 and (figure.data["images_per_s_per_gpu"] > 0).all()


def test_cost_figure_per_joule_only_where_measured_and_per_gpu_hour_everywhere(tmp_path):
    measured = {n: {"energy_j": 250.0} for n in range(1, 5)}
    write_cell(tmp_path / "runs", seed=1, epochs_extra=measured, final_extra={"energy_j": 1000.0})
    write_cell(tmp_path / "runs", seed=2, final_extra={"energy_j": None, "energy_reason": "no powercap"})
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", [cell(seed=1), cell(seed=2)]), tmp_path)
    data = plots.cost_figure(runs).data
    per_kj = data[data["measure"] == "images / kJ"]
    per_hour = data[data["measure"] == "images / training GPU-hour"]
    assert list(per_kj["seed"]) == [1] and per_kj["value"].iloc[0] == pytest.approx(400.0)  # 400 images / 1 kJ
    assert list(per_hour["seed"]) == [1, 2] and per_hour["value"].iloc[0] == pytest.approx(400 / (25.0 / 3600))
    render({"cost": plots.cost_figure(runs)}, tmp_path)


def test_cost_figure_without_measured_energy_promises_no_kilojoule_panel_and_says_why(tmp_path):
    write_cell(tmp_path / "runs", seed=1, final_extra={"energy_j": None, "energy_reason": "no powercap"})
    runs, _ = through_csv(*analysis.collect(tmp_path / "runs", [cell(seed=1)]), tmp_path)
    figure = plots.cost_figure(runs)
    assert set(figure.data["measure"]) == {"images / training GPU-hour"}
    assert figure.labels.title == "Cost: images per training GPU-hour"
    assert "No images per kilojoule: no cell with status ok measured its energy (no powercap)" in figure.labels.caption
    render({"cost": figure}, tmp_path)


def test_imported_studies_appear_beside_the_own_cells(tmp_path):
    write_cell(tmp_path / "runs", gpus=1)
    write_cell(tmp_path / "runs", gpus=2, times=(6.0, 2.0, 3.0, 2.5))
    old = tmp_path / "old"
    old.mkdir()
    header = ",time_per_epoch,loss,lr,training_time,test_time,iou\n"
    for gpus, seconds in ((1, 20.0), (2, 12.0)):
        (old / f"log_hvd_{gpus}.csv").write_text(
            header + f"0,{seconds},0.5,0.001,{2 * seconds},1,0.8\n1,{seconds},0.4,0.001,{2 * seconds},1,0.8\n"
        )
    entries = [{"path": str(old), "framework": "torch", "label": "reference"}]
    collected = summary.collect_study(
        str(tmp_path / "runs"), [cell(gpus=1), cell(gpus=2)], 0.8, entries, Invocation(("snakemake",), "/w", ())
    )
    runs, epochs = through_csv(collected.runs, collected.epochs, tmp_path)
    figures = all_figures(runs, epochs)
    assert set(figures["speedup"].data["source"]) == {"scalebench", "reference"}
    assert set(figures["loss"].data["source"]) == {"scalebench", "reference"}
    assert set(figures["completeness"].data["source"]) == {"scalebench"}  # the grid is the own matrix
    render({k: figures[k] for k in ("speedup", "iou", "loss")}, tmp_path)


@pytest.mark.parametrize("with_predictions", [True, False])
def test_picture_panel(tmp_path, with_predictions):
    for gpus in (1, 4):
        folder = write_cell(tmp_path / "runs", gpus=gpus)
        if with_predictions:
            (folder / "predictions").mkdir()
            for index in (3, 7):
                Image.fromarray(np.full((16, 24), 255, np.uint8)).save(folder / "predictions" / f"test_{index:05d}.png")
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "images.npy", np.zeros((8, 16, 24), np.uint8))
    np.save(data / "masks.npy", np.ones((8, 16, 24), np.uint8))
    runs, _ = analysis.collect(tmp_path / "runs", [cell(gpus=1), cell(gpus=4)])
    figure = picture_panel(runs, tmp_path / "runs", data, 3)
    figure.savefig(tmp_path / "panel.png", dpi=60)
    titles = [axis.get_title() for axis in figure.axes if axis.get_title()]
    if with_predictions:
        assert titles == ["input", "ground truth", "torch native\n1 GPU, seed 1", "torch native\n4 GPU, seed 1"]
        assert len(figure.axes) == 2 * 4  # test images 3 and 7, four columns
    else:
        assert titles == [] and "No finished cell has saved predictions" in figure.texts[1].get_text()


def test_picture_panel_without_any_ok_cell_says_so(tmp_path):
    write_cell(tmp_path / "runs", gpus=1, status="diverged")  # no ok cell: nothing to choose from
    runs, _ = analysis.collect(tmp_path / "runs", [cell(gpus=1), cell(gpus=2)])
    figure = picture_panel(runs, tmp_path / "runs", tmp_path / "data", 3)
    assert "No finished cell has saved predictions" in figure.texts[1].get_text()


def test_every_registered_backend_has_its_own_legend_label_and_colour():
    from scalebench import backends
    from scalebench.report import legend

    labels = {legend.backend_label(name) for name in backends.BACKENDS}
    colours = legend.backend_label_colours()
    assert set(colours) == labels and len(labels) == len(backends.BACKENDS)
    assert len(set(colours.values())) == len(colours) and all(c.startswith("#") for c in colours.values())


def test_a_backend_with_another_base_gets_its_own_ideal_line_and_says_so(tmp_path):
    cells = [cell(gpus=1), cell(gpus=2), cell(backend="fsdp", gpus=2), cell(backend="fsdp", gpus=4)]
    for entry in cells:
        write_cell(tmp_path / "runs", backend=entry["backend"], gpus=entry["gpus"])
    runs, epochs = through_csv(*analysis.collect(tmp_path / "runs", cells), tmp_path)
    table = scaling(runs)
    figure = plots.speedup_figure(table, runs)
    caption = figure.labels.caption.replace("\n", " ")
    assert "Relative to the same framework and backend on 1 GPU (torch native) or 2 GPUs (torch FSDP)." in caption
    ideal = next(layer.geom.data for layer in figure.layers if "base" in getattr(layer.geom.data, "columns", []))
    assert sorted(zip(ideal["base"], ideal["gpus"], ideal["speedup_train_time"])) == [
        (1, 1, 1.0),
        (1, 2, 2.0),
        (1, 4, 4.0),
        (2, 2, 1.0),
        (2, 4, 2.0),
    ]
    render({"speedup": figure}, tmp_path)


def test_the_check_fails_a_figure_that_draws_nothing_or_other_values(tmp_path):
    write_cell(tmp_path / "runs", seed=1)
    write_cell(tmp_path / "runs", seed=2, times=(10.0, 4.0, 8.0, 5.0))
    runs, _ = analysis.collect(tmp_path / "runs", [cell(seed=1), cell(seed=2)])
    assert_draws_its_data("throughput", plots.throughput_figure(runs))
    blank = plots.throughput_figure(runs)
    blank.layers = type(blank.layers)()  # the axes, labels and legend without a single point
    with pytest.raises(AssertionError, match="throughput: nothing drawn"):
        assert_draws_its_data("throughput", blank)
    values = runs.dropna(subset=["images_per_s_per_gpu"])
    shifted = ggplot(values, aes("gpus", "images_per_s_per_gpu")) + geom_point(
        values.assign(images_per_s_per_gpu=values["images_per_s_per_gpu"] * 3)
    )  # its data are the true values, its points others
    with pytest.raises(AssertionError, match="is not drawn"):
        assert_draws_its_data("throughput", shifted)
