"""Apply the build fixes Horovod 0.28.1 needs for torch >= 2.1, TF >= 2.19, CMake 4, GCC >= 13 and a build for one framework.

Upstream made these only on its unreleased master or in open PRs:
  1. compile the PyTorch extension as C++17 (torch's headers need it; upstream #3998);
  2. link the PyTorch extension against the C++17 copy of Gloo that the build
     already makes for TensorFlow (``compatible17_gloo``), not the C++14 one;
  3. leave ``horovod/tensorflow/xla_mpi_ops.cc`` out: its XLA headers moved in
     TF >= 2.19 (upstream PR #4302). XLA ops are off by default anyway;
  4. CMake 4 refuses ``cmake_minimum_required(VERSION 2.8.12)`` in the bundled Gloo
     ("Compatibility with CMake < 3.5 has been removed"): the ``2.8.12...3.10`` range keeps
     the old minimum for old CMakes and sets the policies of 3.10 on new ones (not 3.5:
     CMake 4 warns that versions below 3.10 go next). The two copies of Gloo the build
     makes (compatible_gloo, compatible17_gloo) inherit it;
  5. GCC 13's libstdc++ (and recent libc++) stopped including <string>, <stdexcept> and
     <cstdint> through other headers: the headers that use them include them;
  6. a build for PyTorch alone (each framework's environment has its own Horovod) makes that C++17
     copy of Gloo too, which upstream makes only for TensorFlow: fix 2 links the PyTorch extension
     against it ("cannot find -lcompatible17_gloo" without), with PyTorch's C++ ABI where
     TensorFlow's is not known. A build with TensorFlow makes it exactly as before.

Each fix checks that the text it replaces is there, so a different sdist fails
loudly instead of building something unpatched.

    python3 tools/horovod_fixes.py path/to/horovod-0.28.1
"""

import sys
from pathlib import Path

# (file, text that must be there exactly once, its replacement); a replacement that keeps the
# old text (an added #include) counts as applied when the new text is present.
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
        "CMakeLists.txt",
        "if(HAVE_GLOO AND (DEFINED Tensorflow_CXX17 AND Tensorflow_CXX17))",
        "if(HAVE_GLOO AND ((DEFINED Tensorflow_CXX17 AND Tensorflow_CXX17) OR DEFINED Pytorch_CXX11))",
    ),
    (
        "CMakeLists.txt",
        "    if (Tensorflow_CXX11)\n        target_compile_definitions(compatible17_gloo",
        "    if (Tensorflow_CXX11 OR (NOT DEFINED Tensorflow_CXX11 AND Pytorch_CXX11))\n"
        "        target_compile_definitions(compatible17_gloo",
    ),
    (
        "horovod/tensorflow/CMakeLists.txt",
        'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")\n',
        "# xla_mpi_ops.cc left out (tools/horovod_fixes.py): its XLA headers moved in TF >= 2.19\n",
    ),
    (
        "third_party/gloo/CMakeLists.txt",
        "cmake_minimum_required(VERSION 2.8.12 FATAL_ERROR)",
        "cmake_minimum_required(VERSION 2.8.12...3.10 FATAL_ERROR)",
    ),
    (
        "horovod/common/group_table.h",
        "#include <mutex>\n#include <queue>\n#include <unordered_map>\n",
        "#include <cstdint>\n#include <mutex>\n#include <queue>\n#include <string>\n#include <unordered_map>\n",
    ),
    (
        "horovod/common/common.h",
        "#include <functional>\n#include <memory>\n#include <string>\n",
        "#include <cstdint>\n#include <functional>\n#include <memory>\n#include <stdexcept>\n#include <string>\n",
    ),
    (
        "horovod/common/nvtx_op_range.h",
        "#define HOROVOD_NVTX_OP_RANGE_H\n",
        "#define HOROVOD_NVTX_OP_RANGE_H\n\n#include <cstdint>\n",
    ),
]

# The headers fixes 5 touch: tests compile each on its own against a strict standard library.
PATCHED_HEADERS = sorted({relative for relative, _, _ in FIXES if relative.endswith(".h")})


def applied(text: str, old: str, new: str) -> bool:
    """Whether the fix is in `text` already (so a second run changes nothing)."""
    return new in text and (old not in text or old in new)


def apply(source: Path) -> None:
    for relative, old, new in FIXES:
        path = source / relative
        text = path.read_text()
        if applied(text, old, new):
            continue
        if text.count(old) != 1:
            sys.exit(f"horovod_fixes: expected exactly one {old.strip()!r} in {path}")
        path.write_text(text.replace(old, new))
        print(f"horovod_fixes: patched {relative}: {old.strip()!r} -> {new.strip()!r}")


if __name__ == "__main__":
    apply(Path(sys.argv[1]))
