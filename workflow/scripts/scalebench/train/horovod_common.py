"""What the Horovod backends of both frameworks share; `hvd` is horovod.torch or horovod.tensorflow.

No framework is imported here: each framework's horovod.py imports its own
Horovod module and passes it in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from scalebench import backends, gpu_stack
from scalebench.refusal import HorovodBuildError
from scalebench.settings import HorovodSettings, RunSettings
from scalebench.train.interfaces import Backend
from scalebench.train.rank_env import RankInfo

INSTALL_HINT = "run ./install.sh (it builds Horovod with PyTorch and TensorFlow support)"
# Horovod 0.28's fusion buffer without HOROVOD_FUSION_THRESHOLD (horovod/common/operations.cc)
DEFAULT_FUSION_BYTES = 128 * 1024 * 1024


def check_build(hvd, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a Horovod that cannot run this rank's controller. Ranks started for Gloo (horovodrun
    --gloo, launch/horovod_run.py, horovod_srun.py: HOROVOD_CONTROLLER=gloo) need it built in: the
    local launcher leaves this check to the ranks, where horovodrun would probe it before each launch."""
    if environ.get("HOROVOD_CONTROLLER") == "gloo" and not hvd.gloo_built():
        raise HorovodBuildError(
            f"backend horovod: the ranks were started for Gloo (HOROVOD_CONTROLLER=gloo), but Horovod was "
            f"built without it; {INSTALL_HINT}"
        )
    if not hvd.gloo_built() and not hvd.mpi_built():
        raise HorovodBuildError(f"backend horovod: Horovod was built without Gloo or MPI; {INSTALL_HINT}")


def check_gpu_reductions(hvd, device_type: str, allowed: bool) -> None:
    """A GPU cell needs a Horovod built with NCCL: without it every gradient is copied to the host
    and reduced over TCP (TensorFlow's Horovod ops even run on the CPU), a different benchmark."""
    if device_type == "cuda" and not hvd.nccl_built() and not allowed:
        raise HorovodBuildError(
            "backend horovod: this GPU cell needs Horovod built with NCCL, but this build has none "
            "(its reductions would go through the host over TCP): rebuild it with "
            "HOROVOD_GPU_OPERATIONS=NCCL ./install.sh (README, GPU install), or set "
            "training.horovod.allow_cpu_reductions: true to measure that path on purpose"
        )


def gpu_operations(library: Callable[[], object]) -> gpu_stack.Horovod:
    """Horovod's GPU operations for the GPU stack check (workflow/scripts/check_stack.py): its
    version, whether it was built with NCCL and CUDA, and the refusal a GPU cell of backend horovod
    meets (check_gpu_reductions, the ranks' own check); why it cannot be asked where `library`
    (a backend's HorovodBackend.library) cannot import it."""
    try:
        hvd = library()
    except HorovodBuildError as error:
        return gpu_stack.Horovod(problem=str(error))
    import horovod

    try:
        check_gpu_reductions(hvd, "cuda", allowed=False)
        refusal = None
    except HorovodBuildError as error:
        refusal = str(error)
    return gpu_stack.Horovod(horovod.__version__, bool(hvd.nccl_built()), bool(hvd.cuda_built()), refusal)


# Horovod's timeline (training.profile) starts and stops at run time only where this is set before hvd.init()
DYNAMIC_TIMELINE = "DYNAMIC"
TIMELINE_FILE = "horovod_timeline.json"


def join(hvd, run: RunSettings, place: RankInfo, device_type: str) -> RankInfo:
    """hvd.init() with the collective timeout; this rank's place as Horovod sees it."""
    check_build(hvd)
    check_gpu_reductions(hvd, device_type, run.training.horovod.allow_cpu_reductions)
    # A rank that waits longer than this for a dead or hung peer fails instead of hanging.
    if run.training.collective_timeout_s is not None:
        os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, int(run.training.collective_timeout_s)))
    if run.training.profile is not None:  # a timeline asked for by a user's HOROVOD_TIMELINE=file wins
        os.environ.setdefault("HOROVOD_TIMELINE", DYNAMIC_TIMELINE)
    hvd.init()
    joined = dataclasses.replace(
        place, rank=hvd.rank(), local_rank=hvd.local_rank(), processes=hvd.size(), local_processes=hvd.local_size()
    )
    print(
        f"rank {joined.rank}/{joined.processes}: horovod (gloo={hvd.gloo_enabled()}, "
        f"mpi={hvd.mpi_enabled()}, nccl={hvd.nccl_built()}) on {device_type}",
        flush=True,
    )
    return joined


class HorovodBackend(Backend):
    name = "horovod"
    untimed_comm = (
        "Horovod reduces in its own background thread and exposes no per-collective time; its timeline "
        "(training.profile) shows each allreduce"
    )

    def __init__(
        self,
        place: RankInfo,
        settings: HorovodSettings,
        compression: str = "none",
        device_type: str = "cpu",
        share_gpu: bool = False,
    ) -> None:
        super().__init__(place, device_type, share_gpu)
        self.hvd = self.library()
        check_build(self.hvd)
        self.settings = settings
        self.gradient_compression = compression
        # fp16: each gradient is cast to float16 for the allreduce and back to its type after it
        chosen = self.hvd.Compression.fp16 if compression == "fp16" else self.hvd.Compression.none
        self.compression = self.handed_over(chosen)
        # the registry says whether it accumulates (BackendSpec.accumulates): one statement of the fact
        self.backward_passes_per_step = backends.backward_passes(
            self.framework, self.name, settings.backward_passes_per_step
        )

    @staticmethod
    def library():
        """horovod.torch or horovod.tensorflow, imported (each framework's module says which), or
        HorovodBuildError saying how to get it."""
        raise NotImplementedError

    def handed_over(self, compression):
        """Horovod's compression as this framework hands its tensors over (PyTorch: DenseLayout)."""
        return compression

    @classmethod
    def joined(cls, run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> HorovodBackend:
        """The backend once hvd.init() has joined the ranks (each module's create)."""
        place = join(cls.library(), run, place, device_type)
        return cls(place, run.training.horovod, run.training.compression, device_type, share_gpu)

    def allgather_text(self, text: str) -> list[str]:
        return self.hvd.allgather_object(text)

    def start_timeline(self, folder: Path) -> None:
        # rank 0 coordinates and writes the timeline; every rank makes the call
        if os.environ.get("HOROVOD_TIMELINE") != DYNAMIC_TIMELINE:
            raise RuntimeError(
                f"HOROVOD_TIMELINE={os.environ.get('HOROVOD_TIMELINE')} was set before the cell started: "
                "Horovod writes that timeline, not the profile window's"
            )
        self.hvd.start_timeline(str(Path(folder) / TIMELINE_FILE))

    def stop_timeline(self) -> None:
        self.hvd.stop_timeline()

    def versions(self) -> dict:
        import horovod

        distributed = "horovod"
        if self.device_type == "cuda" and not self.hvd.nccl_built():
            distributed += " (CPU-staged reductions: training.horovod.allow_cpu_reductions)"
        return {"horovod": horovod.__version__, "horovod_nccl": bool(self.hvd.nccl_built()), "distributed": distributed}

    def options(self) -> dict:
        return {"horovod": dataclasses.asdict(self.settings)}

    def collective_library(self) -> str:
        """What its allreduce goes through on this rank: NCCL for GPU tensors where built with it, else Gloo (or MPI)."""
        hvd = self.hvd
        if self.device_type == "cuda" and hvd.nccl_built():
            return "horovod nccl"
        return "horovod mpi" if hvd.mpi_enabled() else "horovod gloo"


def fusion_threshold(environ: dict[str, str] | None = None) -> tuple[int, str]:
    """Horovod's tensor fusion buffer in bytes and where it comes from: HOROVOD_FUSION_THRESHOLD
    (which Horovod keeps in whole MiB), else its default."""
    environ = os.environ if environ is None else environ
    text = environ.get("HOROVOD_FUSION_THRESHOLD", "").strip()
    if text.isdigit():
        return int(text) // 2**20 * 2**20, "HOROVOD_FUSION_THRESHOLD"
    return DEFAULT_FUSION_BYTES, "Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD unset)"

    def shutdown(self) -> None:
        self.hvd.shutdown()
