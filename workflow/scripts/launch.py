"""Start the ranks of one training cell (see scalebench/launch/launcher.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench.launch.launcher import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
