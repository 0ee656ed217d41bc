"""The regimes in the report: bus bandwidth against message size with the gradient size and the
link's peak, the table at the gradient size, and efficiency against each width's gradient bytes
(each width its own series of the scaling model)."""

from __future__ import annotations

import pandas as pd
import pytest
from cell_records import without_split, write_cell
from scalebench import architecture
from scalebench.analysis import collect as analysis
from scalebench.analysis import collectives
from scalebench.analysis.scaling import scaling
from scalebench.records.tables import CELL_COLLECTIVES
from scalebench.report import collective_figures
from scalebench.report.saving import save_figure
from scalebench.train.collectives import bandwidths, empty_row, write_table

WIDTHS = (1, 4)


def measured_table(folder, gpus: int, gradient: int, seconds_per_byte: float, device: str = "cpu") -> None:
    """A cell's collectives.csv: latency 50 us plus the bytes over a bandwidth; one size not measured."""
    rows = []
    for nbytes in (8, 1024, 2**20, gradient, 2**26):
        label = "gradient" if nbytes == gradient else "sweep"
        row = empty_row("all_reduce", nbytes, label, gpus, "torch.distributed gloo", None)
        if nbytes == 2**26:
            rows.append(row | {"reason": "not measured: the budget is spent (training.collectives.budget_s = 1 s)"})
            continue
        latency = 50e-6 + nbytes * seconds_per_byte
        algbw, busbw = bandwidths("all_reduce", nbytes, latency, gpus)
        us = latency * 1e6
        rows.append(row | {"iterations": 3, "latency_us": us, "latency_min_us": us, "latency_max_us": us})
        rows[-1].update(algbw_gbps=algbw, busbw_gbps=busbw)
    write_table(rows, folder / CELL_COLLECTIVES.name)


# the epoch's growth per doubling of the GPUs: Horovod worse at width 1 (latency), better at width 4 (bandwidth)
PENALTY = {("native", 1): 0.05, ("horovod", 1): 0.3, ("native", 4): 0.4, ("horovod", 4): 0.1}
GPUS = (1, 2, 4)


def study(tmp_path, device: str = "cpu", nodes: int = 1):
    """Two widths of torch native and horovod on 1, 2 and 4 GPUs, two seeds, as the issue's
    reversal would look; the multi-GPU cells with their collectives.csv."""
    cells = []
    for backend in ("native", "horovod"):
        for width in WIDTHS:
            gradient = architecture.gradient_bytes(width)
            variant = f"width{width}"
            for gpus in GPUS:
                for seed in (1, 2):
                    doublings = len(bin(gpus)) - 3  # log2 of the GPU count
                    epoch = width**2 * (1 + PENALTY[backend, width] * doublings) * (1 + 0.01 * seed)
                    # no step split: the scaling model fits each width from its epoch times alone
                    folder = write_cell(
                        tmp_path / "runs",
                        backend=backend,
                        gpus=gpus,
                        seed=seed,
                        variant=variant,
                        times=(2 * epoch, epoch, epoch, epoch),
                        run_extra={"nodes": nodes, "model_width": width, "gradient_bytes": gradient},
                        training={"device": device},
                    )
                    without_split(folder)
                    if gpus > 1:
                        measured_table(folder, gpus, gradient, 1 / (1e9 if backend == "native" else 2e9))
                    cells.append(
                        {"framework": "torch", "backend": backend, "variant": variant, "gpus": gpus, "seed": seed}
                    )
    runs, _ = analysis.collect(tmp_path / "runs", cells)
    return runs, collectives.gather(tmp_path / "runs", cells)


def test_the_summary_gathers_every_cells_sizes_with_its_keys_and_where_it_ran(tmp_path):
    runs, table = study(tmp_path)
    assert len(table) == 2 * 2 * 2 * 2 * 5  # backends x widths x GPU counts above 1 x seeds x sizes
    assert set(table["gpus"]) == {2, 4} and set(table["device"]) == {"cpu"} and set(table["nodes"]) == {1}
    assert set(table["model_width"]) == set(WIDTHS)
    skipped = table[table["latency_us"].isna()]
    assert set(skipped["bytes"]) == {2**26} and skipped["reason"].str.contains("budget").all()
    # the runs table has the gradient figures of run.json where it holds them (these cells do not)
    assert set(runs["gradient_bytes"].dropna()) == {architecture.gradient_bytes(w) for w in WIDTHS}


def test_the_table_at_the_gradient_size_is_the_median_over_seeds(tmp_path):
    _, table = study(tmp_path)
    at = collectives.at_gradient(table)
    assert len(at) == 2 * 2 * 2  # backends x widths x GPU counts above 1
    row = at[(at["backend"] == "native") & (at["variant"] == "width4") & (at["gpus"] == 2)].iloc[0]
    gradient = architecture.gradient_bytes(4)
    chosen = (table["backend"] == "native") & (table["variant"] == "width4") & (table["gpus"] == 2)
    expected = table[chosen & (table["size"] == "gradient")]
    assert row["bytes"] == expected["bytes"].iloc[0] == gradient and row["measured"] == row["seeds"] == 2
    assert row["busbw_gbps"] == pytest.approx(expected["busbw_gbps"].median())
    assert row["reason"] == ""


def test_a_cell_not_measured_at_the_gradient_size_says_why_in_the_table(tmp_path):
    folder = write_cell(tmp_path / "runs", gpus=2, run_extra={"nodes": 1})
    row = empty_row("all_reduce", 1945640, "gradient", 2, "horovod gloo", "not measured: the budget is spent")
    write_table([row], folder / CELL_COLLECTIVES.name)
    table = collectives.gather(tmp_path / "runs", [{"framework": "torch", "backend": "native", "gpus": 2, "seed": 1}])
    at = collectives.at_gradient(table)
    assert at["measured"].tolist() == [0] and pd.isna(at["busbw_gbps"].iloc[0])
    assert at["reason"].tolist() == ["not measured: the budget is spent"]


def test_the_bandwidth_figure_marks_the_gradients_and_the_link_peak_or_says_none_was_given(tmp_path):
    _, table = study(tmp_path)
    figure = collective_figures.bandwidth_figure(table, {"intra_node": 300.0, "inter_node": 25.0})
    panels = set(figure.data["panel"])
    assert panels == {f"torch {backend} width{w}: all-reduce" for backend in ("native", "Horovod") for w in WIDTHS}
    assert figure.data["busbw_gbps"].gt(0).all() and 2**26 not in set(figure.data["bytes"])  # not measured: not drawn
    marks = next(layer.geom.data for layer in figure.layers if "xintercept" in layer.mapping)
    assert set(marks["bytes"]) == {architecture.gradient_bytes(w) for w in WIDTHS}
    peaks = next(layer.geom.data for layer in figure.layers if "yintercept" in layer.mapping)
    assert peaks["peak"].tolist() == [300.0]  # one-node cells: the intra-node peak alone
    caption = figure.labels.caption.replace("\n", " ")
    assert "intra-node 300 GB/s" in caption and "CPU ranks" in caption
    save_figure(figure, tmp_path / "bandwidth.png")
    unnamed = collective_figures.bandwidth_figure(table, {"intra_node": None, "inter_node": None})
    assert "No link peak given (cluster.link_gbps)" in unnamed.labels.caption.replace("\n", " ")
    assert not any("yintercept" in layer.mapping for layer in unnamed.layers)


def test_each_width_is_its_own_series_of_the_scaling_model(tmp_path):
    runs, _ = study(tmp_path)
    table = scaling(runs).set_index(["backend", "variant", "gpus"])
    for backend in ("native", "horovod"):
        for width in WIDTHS:
            rows = table.loc[(backend, f"width{width}")]
            # efficiency against the width's own 1-GPU cells: pooled widths would mix 16x longer epochs in
            expected = 1 / (1 + PENALTY[backend, width]) / 2
            assert rows.loc[2, "efficiency_epoch_time"] == pytest.approx(expected, rel=1e-9)
            assert rows.loc[2, "model_status"] == "fitted" and rows.loc[2, "model_epoch_s"] == pytest.approx(
                width**2 * (1 + PENALTY[backend, width]) * 1.015, rel=0.05
            )


def test_efficiency_against_gradient_bytes_puts_each_width_at_its_bytes(tmp_path):
    runs, _ = study(tmp_path)
    figure = collective_figures.efficiency_gradient_figure(scaling(runs), runs)
    data = figure.data
    assert set(data["series"]) == {"torch native", "torch Horovod"} and set(data["GPUs"]) == {"2 GPUs", "4 GPUs"}
    assert set(data["gradient_bytes"]) == {architecture.gradient_bytes(w) for w in WIDTHS}
    at_two = data[data["gpus"] == 2]
    horovod = at_two[at_two["series"] == "torch Horovod"].set_index("gradient_bytes")["efficiency_epoch_time"]
    native = at_two[at_two["series"] == "torch native"].set_index("gradient_bytes")["efficiency_epoch_time"]
    small, large = (architecture.gradient_bytes(w) for w in WIDTHS)
    assert native[small] > horovod[small] and horovod[large] > native[large]  # the reversal is visible
    save_figure(figure, tmp_path / "efficiency_gradient.png")


def test_cells_without_gradient_bytes_leave_the_figure_saying_why(tmp_path):
    for gpus in (1, 2):
        write_cell(tmp_path / "runs", gpus=gpus)  # a record from before model.width
    cells = [{"framework": "torch", "backend": "native", "gpus": g, "seed": 1} for g in (1, 2)]
    runs, _ = analysis.collect(tmp_path / "runs", cells)
    figure = collective_figures.efficiency_gradient_figure(scaling(runs), runs)
    assert figure.data is None and "records its gradient bytes" in figure.layers[0].geom.aes_params["label"]
