"""horovodrun without the probe it runs before every Gloo launch: the local Horovod cells' launcher.

Before it starts a Gloo run, horovodrun asks whether Horovod was built with Gloo
(horovod.common.util.gloo_built): it forks a process that imports Horovod's extension of the first
framework it finds (in the single environment of earlier releases, TensorFlow's whatever the cell
trained; now the environment's own framework). On a loaded two-core machine that was about 7 CPU-s
and 10 s before a local Horovod cell's first rank started (docs/benchmarks.md, "horovodrun's probe"). The ranks answer the same question themselves, in the framework they import
anyway, before hvd.init(): a Horovod built without Gloo refuses the cell, naming it
(train/horovod_common.py check_build, under the HOROVOD_CONTROLLER=gloo that this launch sets). So
this runs horovodrun's own command line with that probe left to the ranks; without --gloo it is
horovodrun unchanged. Everything else (the rendezvous, the ranks' environment, the output, a failed
rank ending the others) is horovodrun's.

    python horovod_run.py --gloo -np 2 -H localhost:2 python train.py ...
"""

from __future__ import annotations

import sys


def ranks_check_gloo(verbose: bool = False) -> bool:
    """horovodrun's gloo_built(), answered without a probe: each rank checks the build before hvd.init()."""
    return True


def main(argv: list[str] | None = None) -> int:
    """horovodrun with `argv` (default: this process's arguments); 0 once every rank ended well
    (horovodrun raises, and so exits 1, when one did not)."""
    args = sys.argv[1:] if argv is None else argv
    from horovod.runner import launch

    if "--gloo" in args:
        launch.gloo_built = ranks_check_gloo  # what run_controller asks before a Gloo run
    sys.argv = ["horovodrun", *args]
    launch.run_commandline()
    return 0
