"""Check this node's GPU stack before a study: the NVIDIA driver and GPUs against each installed
framework's build (scalebench/gpu_stack.py). Run it with the pipeline's Python on a GPU node:

    srun -p gpu --gres=gpu:1 .venv/bin/python workflow/scripts/check_stack.py

It reads the node's answers once (nvidia-smi), asks each framework's environment for its build's
(this script with --build-answers, run by that environment's Python), prints one verdict line per
framework and GPU, and exits 1 on a mismatch, 2 where there is no GPU to check, else 0.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scalebench import environments, gpu_stack  # noqa: E402
from scalebench.cluster import nvidia_smi  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--build-answers",
        metavar="FRAMEWORK",
        choices=sorted(environments.PACKAGES),
        help="print this environment's build answers for FRAMEWORK as JSON (run by the check itself)",
    )
    args = parser.parse_args(argv)
    if args.build_answers:
        from scalebench.train.stack_answers import build_answers

        print(json.dumps(build_answers(args.build_answers).to_json()), flush=True)
        return 0
    node = nvidia_smi.read_node()
    builds, unasked = [], {}
    if node.gpus:
        for framework in environments.installed_frameworks():
            build, why = gpu_stack.ask_build(environments.resolve(framework), os.path.abspath(__file__))
            if build is None:
                unasked[framework] = why
            else:
                builds.append(build)
    result = gpu_stack.report(node, builds, unasked)
    print("\n".join(result.lines), flush=True)
    if not node.gpus:
        return 2
    return 1 if result.mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
