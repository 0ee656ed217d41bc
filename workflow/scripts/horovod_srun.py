"""Start Horovod ranks with srun, no ssh needed (see scalebench/launch/horovod_rendezvous.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.launch.horovod_rendezvous import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
