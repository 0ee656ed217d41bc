"""A framework's test session: the pipeline environment's packages after the framework's own.

run_tests.sh runs the test modules that import a framework with that framework's Python
(.venv/frameworks/<framework>/bin/python), this folder on PYTHONPATH and SCALEBENCH_TEST_LAYER
naming the pipeline environment's site-packages: Python imports this module as it starts (every
process of the session: pytest, its workers, the children a test starts) and appends those folders
to sys.path, so pytest and the pipeline's packages import while the framework's own environment
wins every name both have. The ranks a test launches through launch.py run in their environment
alone: the probe and the launcher start them without this folder (environments.py, launcher.py).
"""

import importlib.machinery
import importlib.util
import os
import site
import sys

for folder in os.environ.get("SCALEBENCH_TEST_LAYER", "").split(os.pathsep):
    if folder:
        site.addsitedir(folder)

# Another sitecustomize behind this one on the path (tools/process_census.py's hook, a site's own)
# runs too: this one must not hide it.
_here = os.path.dirname(os.path.abspath(__file__))
_behind = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _here]
)
if _behind is not None and _behind.loader is not None:
    _behind.loader.exec_module(importlib.util.module_from_spec(_behind))
