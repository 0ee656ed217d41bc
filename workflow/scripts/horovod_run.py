"""Start a cell's Horovod ranks on this host: horovodrun without its probe of TensorFlow's Horovod
extension (see scalebench/launch/horovod_run.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.launch.horovod_run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
