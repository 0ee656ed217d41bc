#!/bin/bash
# The demo of each tree named, one after the other, from a new results folder: its wall time, its
# cells and the comparisons it decided (docs/benchmarks.md, "The demo in under five minutes").
# Usage: tools/demo_runs.sh TREE [TREE ...]   (a tree: a checkout with its .venv, e.g. a git worktree
# whose .venv is a link to a warm one; a tree may be named more than once to run it again)
set -u
for tree in "$@"; do
  cd "$tree" || exit 1
  rm -rf results .snakemake
  start=$(date +%s.%N)
  .venv/bin/snakemake --profile profiles/local > demo.log 2>&1
  rc=$?
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  said=$(.venv/bin/python - <<'PY'
import pandas as pd
verdicts = pd.read_csv("results/summary/verdicts.csv")
decided = verdicts[verdicts.state.isin(["different", "equivalent"])]
runs = pd.read_csv("results/summary/runs.csv")
rows = [
    f"{r.kind} {r.framework if r.compared == 'backends' else r.backend} g{r.gpus} {r.a}/{r.b} {r.ratio:.2f} p_holm {r.p_holm:.3f}"
    for r in decided.itertuples()
]
print(f"cells {len(runs)}, {(runs.status == 'ok').sum()} ok; decided {len(decided)}: {'; '.join(rows) or '-'}")
PY
)
  printf "%s rc=%s demo %.0f s: %s\n" "$tree" "$rc" "$wall" "$said"
done
