"""Apply the three build-system fixes Horovod 0.28.1 needs for torch >= 2.1 and TF >= 2.19.

Upstream made these only on its unreleased master or in open PRs:
  1. compile the PyTorch extension as C++17 (torch's headers need it; upstream #3998);
  2. link the PyTorch extension against the C++17 copy of Gloo that the build
     already makes for TensorFlow (``compatible17_gloo``), not the C++14 one;
  3. leave ``horovod/tensorflow/xla_mpi_ops.cc`` out: its XLA headers moved in
     TF >= 2.19 (upstream PR #4302). XLA ops are off by default anyway.

Each fix checks that the text it replaces is there, so a different sdist fails
loudly instead of building something unpatched.

    python3 tools/horovod_fixes.py path/to/horovod-0.28.1
"""

import sys
from pathlib import Path

FIXES = [
    (
        "horovod/torch/CMakeLists.txt",
        "    set(CMAKE_CXX_STANDARD 14)",
        "    set(CMAKE_CXX_STANDARD 17)",
    ),
    (
        "horovod/torch/CMakeLists.txt",
        "        list(APPEND PYTORCH_LINKER_LIBS gloo)",
        "        list(APPEND PYTORCH_LINKER_LIBS compatible17_gloo)",
    ),
    (
        "horovod/tensorflow/CMakeLists.txt",
        'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")\n',
        "",
    ),
]


def apply(source: Path) -> None:
    for relative, old, new in FIXES:
        path = source / relative
        text = path.read_text()
        if new and new in text and old not in text:
            continue  # already applied
        if text.count(old) != 1:
            sys.exit(f"horovod_fixes: expected exactly one {old.strip()!r} in {path}")
        path.write_text(text.replace(old, new))
        print(f"horovod_fixes: patched {relative}: {old.strip()!r} -> {new.strip()!r}")


if __name__ == "__main__":
    apply(Path(sys.argv[1]))
