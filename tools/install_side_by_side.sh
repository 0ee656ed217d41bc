#!/usr/bin/env bash
# The README's first command of two commits side by side: each on a fresh clone of this repository,
# with an empty Horovod wheel cache of its own (the machine's pip cache is shared, and warm after the
# first install), alternating the commits, ROUNDS rounds. Prints each part's wall and CPU seconds
# (/usr/bin/time: user + sys of the command and the processes it waited for), the load average, and
# with --demo the cells the demo trained (its seed rounds add cells where a verdict is open).
#
#   tools/install_side_by_side.sh OLD NEW [ROUNDS] [--demo]
#
# Without --demo only ./install.sh is timed; with it the demo study and its report too, as the
# README's first command runs them. Run it on a quiet machine: each install takes minutes.
set -u
old=${1:?usage: install_side_by_side.sh OLD NEW [ROUNDS] [--demo]}
new=${2:?usage: install_side_by_side.sh OLD NEW [ROUNDS] [--demo]}
rounds=${3:-1}
demo=${4:-}
here=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d)
timed() {  # LABEL DIR COMMAND...: run COMMAND in DIR, print its wall and CPU seconds
    local label=$1 dir=$2
    shift 2
    (cd "$dir" && /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" > "$work/$label.log" 2>&1)
    local code=$? wall user sys
    read -r wall user sys < "$work/time"
    printf '%-28s rc=%d  wall %7.1f s  CPU %7.1f s  load %s\n' "$label" "$code" "$wall" \
        "$(echo "$user + $sys" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
}
for round in $(seq "$rounds"); do
    for commit in "$old" "$new"; do
        dir=$work/clone
        rm -rf "$dir"
        git clone -q "$here" "$dir" && git -C "$dir" checkout -q "$commit"
        export SCALEBENCH_CACHE=$work/cache-$commit-$round
        timed "round $round $commit install" "$dir" ./install.sh
        if [[ $demo == --demo ]]; then
            timed "round $round $commit demo" "$dir" .venv/bin/snakemake --profile profiles/local
            timed "round $round $commit report" "$dir" .venv/bin/snakemake --profile profiles/local --report results/report.html
            # the seed rounds add cells where a verdict is still open: how many the demo trained
            echo "round $round $commit: $(find "$dir/results/runs" -name run.json | wc -l) cells trained"
        fi
    done
done
rm -rf "$work"
