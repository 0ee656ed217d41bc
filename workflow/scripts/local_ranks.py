"""Start a cell's ranks on this host with torchrun's variables: the local launcher of TensorFlow's
multi-worker cells (see scalebench/launch/local_ranks.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.launch.local_ranks import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
