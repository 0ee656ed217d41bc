"""Train the same four cells with this checkout and compare their records with another checkout's:
a refactor of the rank that changes no behaviour leaves run.json and metrics.jsonl the same.

    .venv/bin/python tools/compare_records.py run OUT                  # train the cells into OUT/<cell>/
    .venv/bin/python tools/compare_records.py compare BEFORE AFTER [--again BEFORE2]

`run` trains a torch native, a torch horovod, a tensorflow native and a tensorflow mirrored cell of
two replicas each on the CPU (the same synthetic data, seed and settings every time; a checkpoint
every epoch, a profile window, TensorBoard curves and predictions on, so those paths run too),
through launch.py as the train rule starts them: with the pipeline's Python (the config's
validation), which runs launch.py, whose ranks run in their framework's environment
(.venv/frameworks/<framework>, with torchrun and horovodrun; scalebench/environments.py).

`compare` flattens every record to paths (run.training.batch_per_gpu, epoch[2].ranks[1].compute_s,
...) and checks, per cell, that both sides wrote the same paths, and that every value is the same
where it is deterministic. A value is deterministic where two runs of the same code agree: with
`--again`, a second run of the BEFORE checkout decides it per path; without it, a path whose last
name says it holds a time, a date, a host or a memory figure is left out (NONDETERMINISTIC). The
commit that ran (CHECKOUT) differs between checkouts by design: its key is compared, not its value.
Exit status 1 on a difference, naming each.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))

from scalebench import environments  # noqa: E402
from scalebench.data import pairing, preprocess, synthetic  # noqa: E402
from scalebench.launch import launcher  # noqa: E402

CELLS = [("torch", "native"), ("torch", "horovod"), ("tensorflow", "native"), ("tensorflow", "mirrored")]
GPUS, SEED = 2, 1
CONFIG = {
    "dataset": {"source": "synthetic", "image_size": [32, 48], "synthetic": {"count": 40, "size": [48, 64]}},
    "matrix": {"frameworks": ["torch", "tensorflow"], "backends": ["native"], "gpus": [GPUS], "seeds": [SEED]},
    "training": {
        "epochs": 3,
        "batch_per_gpu": 4,
        "threads_per_rank": 1,
        "collective_timeout_s": 60,
        "eval_every": 1,
        "checkpoint_every": 1,
        "predictions": 2,
        "tensorboard": True,
        "loader": {"workers": 0},
        "profile": {"epoch": 2, "steps": 2},
        "collectives": {"budget_s": 0.5, "max_bytes": 2**20, "iterations": 3},
    },
}
# without a second run: the last names of paths whose values are measurements of time, dates,
# hosts or memory (they differ between two runs of the same code)
# what names the checkout that ran (its commit, or why there is none): differs between checkouts by design
CHECKOUT = {"git_commit", "git_commit_reason"}
NONDETERMINISTIC = re.compile(
    r"^(start|end|argv|git_commit|hosts|rank_hosts|launch_host|host|straggler_rank|straggler_host|mfu|"
    r"compute_spread|comm_overlap|seconds|data_placement_reason)$|(_s|_us|_gbps|_mb|_hours|_tflops|_joules)$"
)


def prepare(root: Path) -> Path:
    """The tests' synthetic dataset (40 pairs at 32 x 48), preprocessed as the pipeline does, in
    `root`'s parent folder: the runs beside each other train on the same arrays."""
    prepared = root.parent / "data" / "prepared"
    if not (prepared / "manifest.json").exists():
        synthetic.write_dataset(root.parent / "data" / "raw", 40, 48, 64, seed=0)
        pairs, rule = pairing.find_pairs(root.parent / "data" / "raw")
        preprocess.preprocess(pairs, prepared, (32, 48), 0.2, 42, {"source": "synthetic", "pairing": rule})
    return prepared


def pipeline_python_or_exit() -> None:
    """`run` validates the config (jsonschema, the pipeline's): with another Python (a framework's,
    which has neither jsonschema nor the other framework), an exit naming the command to use."""
    if importlib.util.find_spec("jsonschema") is None:
        python = environments.install_root() / "bin" / "python"
        raise SystemExit(
            f"compare_records.py run needs the pipeline's Python ({python}), which runs launch.py as the train "
            f"rule does; this one ({sys.executable}) cannot import jsonschema: "
            f"{python} {' '.join(sys.argv)}"
        )


def run(root: Path) -> int:
    pipeline_python_or_exit()
    from scalebench import config as sb_config

    schema = sb_config.load_schema(ROOT / "config" / "schema.yaml")
    config = sb_config.validate(json.loads(json.dumps(CONFIG)), schema)
    data = prepare(root)
    # launch.py (the pipeline's Python) puts each cell's framework environment's bin folder, with its
    # torchrun and horovodrun, first on its ranks' PATH (launcher.rank_environment)
    env = dict(os.environ, SCALEBENCH_EXECUTOR="local", PYTHONUNBUFFERED="1")
    failed = 0
    for framework, backend in CELLS:
        settings = sb_config.train_settings(config, sb_config.Cell(framework, backend, GPUS, SEED))
        out = root / f"{framework}-{backend}"
        command = launcher.command_line(settings, data, out, config["launchers"])
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        status = json.loads((out / "run.json").read_text()).get("status") if (out / "run.json").exists() else None
        print(f"{framework}/{backend}: exit {result.returncode}, status {status}", flush=True)
        if result.returncode or status != "ok":
            failed += 1
            print((result.stdout + result.stderr)[-3000:], flush=True)
    return 1 if failed else 0


def flat(value, path: str) -> dict[str, object]:
    """Every leaf of a JSON value by its path."""
    if isinstance(value, dict):
        found = {} if value else {path: {}}
        for key, item in value.items():
            found.update(flat(item, f"{path}.{key}"))
        return found
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        found = {}
        for index, item in enumerate(value):
            found.update(flat(item, f"{path}[{index}]"))
        return found
    return {path: value}


def records(cell: Path) -> dict[str, object]:
    """run.json and metrics.jsonl of a cell folder, flattened (the epochs by their number)."""
    leaves = flat(json.loads((cell / "run.json").read_text()), "run")
    for line in (cell / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            name = f"epoch[{record['epoch']}]" if record["type"] == "epoch" else record["type"]
            leaves.update(flat(record, name))
    return leaves


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(before: Path, after: Path, again: Path | None) -> int:
    problems, compared, skipped = [], 0, set()
    for framework, backend in CELLS:
        name = f"{framework}-{backend}"
        old, new = records(before / name), records(after / name)
        repeat = records(again / name) if again is not None else None
        for path in sorted(set(old) ^ set(new)):
            problems.append(f"{name}: {path} only {'before' if path in old else 'after'}")
        for path in sorted(set(old) & set(new)):
            last = re.sub(r"\[\d+\]", "", path.rsplit(".", 1)[-1])
            stable = same(old[path], repeat.get(path)) if repeat is not None else not NONDETERMINISTIC.search(last)
            stable = stable and last not in CHECKOUT
            if not stable:
                skipped.add(re.sub(r"\[\d+\]", "[]", path))
                continue
            compared += 1
            if not same(old[path], new[path]):
                problems.append(f"{name}: {path}: {old[path]!r} before, {new[path]!r} after")
    print(f"compared {compared} deterministic values of {len(CELLS)} cells; {len(skipped)} paths vary between runs")
    for path in sorted(skipped):
        print(f"  varies: {path}")
    for problem in problems:
        print(f"DIFFERS {problem}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run").add_argument("out", type=Path)
    comparing = commands.add_parser("compare")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    comparing.add_argument("--again", type=Path, help="a second run of the before checkout")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.out)
    return compare(args.before, args.after, args.again)


if __name__ == "__main__":
    sys.exit(main())
