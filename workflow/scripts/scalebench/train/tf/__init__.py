"""TensorFlow: the framework's side of the training contract and its backends (MultiWorkerMirrored, Horovod).

This package sets the environment TensorFlow reads when it is imported: every module
in it is imported through this file first, so the variables below are in place.

TF_USE_LEGACY_KERAS=1: Horovod's TensorFlow API needs Keras 2 variables (tf_keras).

TF_ENABLE_ONEDNN_OPTS=1: the Linux x86 TensorFlow wheel turns oneDNN's CPU kernels on by
itself only on CPUs with AVX-512 VNNI, BF16 or AMX. Without them a CPU training step of the
UNet is 3.6x slower, which made PyTorch look 1.7x faster than TensorFlow for a reason that
has nothing to do with either framework (docs/benchmarks.md, framework parity). GPU kernels
are unaffected. A value the user exported wins.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
