"""What the Horovod backends of both frameworks share; `hvd` is horovod.torch or horovod.tensorflow.

No framework is imported here: each framework's horovod.py imports its own
Horovod module and passes it in.
"""

from __future__ import annotations

import os

from scalebench.launch.rank_env import RankInfo
from scalebench.train.interfaces import Backend
from scalebench.train.settings import RunSettings

INSTALL_HINT = "run ./install.sh (it builds Horovod with PyTorch and TensorFlow support)"


def check_build(hvd) -> None:
    if not hvd.gloo_built() and not hvd.mpi_built():
        raise RuntimeError(f"backend horovod: Horovod was built without Gloo or MPI; {INSTALL_HINT}")


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, place: RankInfo, hvd) -> None:
        super().__init__(place)
        check_build(hvd)
        self.hvd = hvd

    def join(self, run: RunSettings, device_type: str) -> None:
        """hvd.init() with the collective timeout; this rank's place as Horovod sees it."""
        hvd = self.hvd
        # A rank that waits longer than this for a dead or hung peer fails instead of hanging.
        os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, int(run.training.collective_timeout_s)))
        hvd.init()
        self.rank, self.local_rank = hvd.rank(), hvd.local_rank()
        self.world_size, self.local_world_size = hvd.size(), hvd.local_size()
        self.replicas, self.replica_ids = self.world_size, [self.rank]
        print(
            f"rank {self.rank}/{self.world_size}: horovod (gloo={hvd.gloo_enabled()}, "
            f"mpi={hvd.mpi_enabled()}, nccl={hvd.nccl_built()}) on {device_type}",
            flush=True,
        )

    def allgather_text(self, text: str) -> list[str]:
        return self.hvd.allgather_object(text)

    def versions(self) -> dict:
        import horovod

        return {"horovod": horovod.__version__, "distributed": "horovod"}

    def shutdown(self) -> None:
        self.hvd.shutdown()
