"""Run one rank of a training cell (started by the launcher; see scalebench/train/entry.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.train.entry import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(end_process=True))
