"""run.json of one cell: assembled on every rank, written by rank 0 at four moments of the run.

1. start (the constructor): as the cell starts (status running), once the data's placement is
   decided: the cell, the model's and the device's description, the ranks' layout (each rank's
   host, device, cores), the site, the versions, the training settings as resolved
   (provenance.training_record), the peak FLOP/s.
2. add: fields known later in the setup (the collective benchmark's summary), written at once.
3. first epoch: what the run's first step observed (observed.py: compute_dtype, compiled), held
   from the step's check and written once the first epoch's clock has stopped.
4. finish: the outcome (status, end, setup time, epochs, cost), the libraries as loaded by then
   and the compiles of the whole run.

Every rank holds the record, since the epoch records read it (the model's FLOPs, the peak, the
replicas); only rank 0 writes, each time whole and atomically (records/store.py). A rank that
fails records the failure itself (provenance.record_failure, from entry.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from scalebench import architecture, records
from scalebench.records import store
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import binding, flops, observed, provenance, site
from scalebench.train.interfaces import Backend, Device, Model, Numerics
from scalebench.train.placement import DataPlacement

FILE = "run.json"  # in the cell's folder


class RunRecord:
    """run.json of this rank's cell (`fields`), and the ranks' hosts in rank order (`hosts`).

    Built as the cell starts, every rank joining its gathers, from what the rank built: the model
    (its parameters and gradient bytes), the device (its type, layout, TF32, the framework's
    versions, its model's name) and the numerics (the determinism)."""

    def __init__(
        self,
        run: RunSettings,
        backend: Backend,
        process: ProcessFacts,
        config_hash: str,
        *,
        framework: str,
        model: Model,
        device: Device,
        numerics: Numerics,
        placement: DataPlacement,
        cpu_binding: binding.Binding | None = None,  # what binding.bind did in this process (None: it did not run)
    ) -> None:
        self.run, self.backend, self.process = run, backend, process
        self.path = Path(run.out_dir) / FILE
        self.hosts = backend.allgather_text(provenance.host_name())  # every rank joins, first
        self.observed = False  # the first step's observations are in (observe)
        record = provenance.start_record(dataclasses.asdict(run.cell), config_hash)
        record.update({**model.fields(), **device.describe(), "deterministic": numerics.deterministic})
        record.update(self.process_fields(placement))
        record["versions"] = {**record.get("versions", {}), **backend.versions()}
        record["settings"] = run.source
        record["training"] = provenance.training_record(
            run.training,
            framework=framework,
            device_type=backend.device_type,
            replicas=backend.replicas,
            threads=process.threads,
            deterministic=record["deterministic"],
            passes=backend.backward_passes_per_step,
            compression=backend.gradient_compression,
            backend_options=backend.options(),
        )
        record.update(self.rank_fields(device.model(), bool(record["tf32"]), cpu_binding))
        self.fields = record
        self.write()

    @property
    def writes(self) -> bool:
        return self.backend.rank == 0

    def write(self) -> None:
        if self.writes:
            store.write_run(self.path, self.fields)

    def process_fields(self, placement: DataPlacement) -> dict:
        """How the cell's processes ran: replicas, ranks, threads, GPU rules, data and its placement."""
        run, backend, process = self.run, self.backend, self.process
        return {
            "replicas": backend.replicas,
            "processes": backend.processes,
            "ranks_per_node": backend.local_processes,
            "threads_per_rank": process.threads,
            "gpu_required": process.gpu_required,
            "shared_gpu": process.share_gpu,
            "data_key": Path(run.data_dir).name,  # the prepared arrays' folder is named by their settings
            "model_width": run.model_width,  # the UNet's channel multiplier (parameters, gradient_bytes: describe)
            "collective_timeout_s": run.training.collective_timeout_s,
            "network_interface": run.network_interface,  # cluster.network_interface
            "precision": run.training.precision,
            "data_placement": placement.kind,
            "data_device_bytes": placement.device_bytes,
            "data_placement_reason": placement.reason,
        }

    def rank_fields(self, device_model: str, tf32: bool, cpu_binding: binding.Binding | None) -> dict:
        """Every rank's host, device and cores (gathered: every rank joins, in this order; `cpu_binding`
        says how its cores were bound), rank 0's site, the model's FLOPs and the device's peak at the
        cell's precision."""
        run, backend = self.run, self.backend
        devices = backend.allgather_text(device_model)
        fields = provenance.rank_layout(self.hosts, devices, run.image_size, architecture.channels(run.model_width))
        # each rank's cores, how the rank's entry bound them, a local cell's GPU ids
        fields.update(binding.fields(backend.allgather_text, applied=cpu_binding))
        if self.writes:  # the node's driver, GPUs, topology, network, NCCL and the ranks' variables
            fields.update(site.fields())
        precision = flops.precision_key(run.training.autocast_dtype, tf32)
        fields.update(flops.peak_fields(devices[0], backend.device_type == "cuda", precision, run.peak_tflops))
        return fields

    def add(self, fields: dict) -> None:
        """Fields the setup learns after the start (the collective benchmark's summary), written at once."""
        self.fields.update(fields)
        self.write()

    def observe(self, steps: dict) -> None:
        """What the first step did (the steps' observed(), checked): written after the
        first epoch (first_epoch), so that the write stays off the epoch's clock."""
        self.fields.update(observed.run_fields(steps))
        self.observed = True

    def first_epoch(self) -> None:
        """After the first epoch of this process (a resumed run's too): the first step's observations."""
        self.write()

    def finish(self, final: dict, start_epoch: int, observed_steps: Callable[[], dict]) -> None:
        """Rank 0 at the end: one summary line in train.log and the cell's outcome in run.json,
        with the whole run's compiles (`observed_steps`: the steps' observed())."""
        if not self.writes:
            return
        record = self.fields
        site.update_libraries(record)  # NCCL as loaded by now: some load it at their first reduction
        if self.observed:  # the whole run's compiles (recompiles come after the first step)
            record.update(observed.run_fields(observed_steps()))
        stopped = "  (stopped at the target IOU)" if final["stopped_at_target"] else ""
        print(
            f"final: status {final['status']}{stopped}  test loss {final['test_loss']}  IOU {final['iou']}  "
            f"train {final['train_time_s']:.1f} s",
            flush=True,
        )
        record.update(
            status=final["status"],
            end=records.now_iso(),
            setup_s=final["setup_s"],
            resumed_from_epoch=start_epoch or None,
            epochs_completed=final["epochs_completed"],
            stopped_at_target=final["stopped_at_target"],
        )
        record.update({key: final.get(key) for key in records.COST_FIELDS})
        self.write()
