"""training.loader.placement: device and host give every backend the same batches in the same order.

Each cell runs as the train rule runs it (workflow/scripts/launch.py with the default launchers:
torchrun for PyTorch, local_ranks.py for TensorFlow, horovodrun (horovod_run.py), one process for dp
and mirrored, each in the cell's framework's environment), on CPU ranks, once with the samples in
the ranks' memory (device) and once read through the loader each step (host). Same samples,
same order, same conversion: the losses, validation and test figures are equal. The cells are
trained once per run (paired_cells.py): test_collectives reads the device ones' benchmark, and
test_torch_backends compares FSDP's device cell with DDP's and resumes it. DataParallel's host
cell reaches host by auto's choice, a device_memory_share no sample fits, which the auto test reads
(the other backends name host; the placement is decided once, before any backend's code, placement.py).
"""

from __future__ import annotations

import pytest
from conftest import cell_settings, read_records
from paired_cells import SCHEDULE, UNMEASURED, placed, trained_once, unmeasured_over_loopback

pytestmark = pytest.mark.integration

# every backend of both frameworks at the most ranks it can have on CPUs here
CELLS = [
    ("torch", "native", 2),
    ("torch", "horovod", 2),
    ("torch", "fsdp", 2),
    ("torch", "dp", 1),
    ("tensorflow", "native", 2),
    ("tensorflow", "horovod", 2),
    ("tensorflow", "mirrored", 2),
]


# a share of the device's free memory that no sample fits: auto keeps the samples on the host
NOTHING_FITS = 1e-9


def host_cell(framework: str, backend: str, gpus: int) -> dict:
    """placed's host cell, without the collective benchmark that test_collectives reads of the device
    cells; DDP's the one over the loopback interface that test_network_interface and test_collectives
    read, DataParallel's at placement auto with a share that nothing fits."""
    if backend == "native" and framework == "torch":
        return unmeasured_over_loopback()
    if backend != "dp":
        return placed(framework, backend, gpus, "host", collectives=UNMEASURED)
    settings = placed(framework, backend, gpus, "auto")
    settings["training"]["loader"]["device_memory_share"] = NOTHING_FITS
    return settings


def figures(out) -> list[float]:
    epochs, final, _ = read_records(out)
    return [value for e in epochs for value in (e["loss"], e["val_loss"], e["val_iou"])] + [
        final["test_loss"],
        final["iou"],
    ]


@pytest.mark.parametrize(("framework", "backend", "gpus"), CELLS, ids=[f"{f}-{b}" for f, b, _ in CELLS])
def test_device_and_host_placement_train_identically(prepared_data, tmp_path_factory, framework, backend, gpus):
    settings = {"device": placed(framework, backend, gpus, "device"), "host": host_cell(framework, backend, gpus)}
    outs = {placement: trained_once(tmp_path_factory, settings[placement], prepared_data) for placement in settings}
    device, host = (read_records(outs[placement])[2] for placement in ("device", "host"))
    assert figures(outs["device"]) == figures(outs["host"])
    assert device["data_placement"] == "device" and host["data_placement"] == "host"
    # the training samples over both epochs, and the validation and test samples, on one device
    assert 0 < device["data_device_bytes"] <= 40 * 2 * 32 * 48 and host["data_device_bytes"] == 0
    assert device["training"]["loader"]["placement"] == "device"


def test_auto_keeps_samples_on_the_host_when_they_exceed_the_share_and_records_why(prepared_data, tmp_path_factory):
    # DataParallel's host cell, trained once per run: the placement is chosen, and recorded, before the first step
    run = read_records(trained_once(tmp_path_factory, host_cell("torch", "dp", 1), prepared_data))[2]
    assert run["training"]["loader"]["placement"] == "auto"
    assert run["training"]["loader"]["device_memory_share"] == NOTHING_FITS
    assert run["data_placement"] == "host" and "device_memory_share" in run["data_placement_reason"]
    # auto, as tiny_config leaves it: a few KiB fit anywhere (the one-rank cell test_compiled_steps compares)
    run = read_records(trained_once(tmp_path_factory, cell_settings("torch", "native", 1, **SCHEDULE), prepared_data))[
        2
    ]
    assert run["data_placement"] == "device" and run["data_placement_reason"].startswith("auto:")
