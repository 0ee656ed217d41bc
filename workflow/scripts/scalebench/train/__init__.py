"""One rank of a training cell: the entry point, the one training loop and what it measures.

The loop (loop.py) holds what a framework's spec of builders builds (interfaces.py:
FrameworkSpec; train/torch/spec.py, train/tf/spec.py) and a Backend, and delegates
run-wide concerns to components (run_record.py, preflight.py, collectives.py,
profiling.py, energy.py); train/torch/ and train/tf/ hold the same file names for
the same roles. A rank of one framework never imports the other.
"""
