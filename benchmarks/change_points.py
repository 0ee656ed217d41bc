"""Benchmark: the history's change-point search on series whose truth is known (issue 62).

The History section searches every series of studies (one figure of one cell key on one site with
one setting) for change points (analysis/change_points.py: ruptures' binary segmentation, each split
kept by a permutation test at history.change_alpha). Measured here on synthetic series of
`--studies` per-study values with Gaussian noise of each `--noise` level (a share of the level):

- the false-alarm rate: the share of `--series` noise-only series in which a change is found
  (at most alpha, the method's promise);
- the power: the share of `--trials` series with a `--drop` planted from study `--at` on in which
  exactly that change, and no other, is found, at each noise level;
- the search's cost per series (milliseconds), which the analysis pays once per series.

    .venv/bin/python benchmarks/change_points.py [--series 2000] [--trials 500] [--studies 12]
                                                 [--at 8] [--drop 0.1] [--noise 0.01 0.02 0.03] [--alpha 0.01]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

_common.runs_with(_common.PIPELINE, __name__)

import numpy as np  # noqa: E402
from scalebench.analysis import change_points  # noqa: E402

SMOKE = {"series": 40, "trials": 20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=2000, help="noise-only series (default 2000)")
    parser.add_argument("--trials", type=int, default=500, help="series with the planted drop per noise level")
    parser.add_argument("--studies", type=int, default=12, help="studies per series (default 12)")
    parser.add_argument("--at", type=int, default=8, help="the first study (1-based) of the planted drop")
    parser.add_argument("--drop", type=float, default=0.1, help="the planted drop, a share of the level")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.01, 0.02, 0.03], help="noise levels")
    parser.add_argument("--alpha", type=float, default=0.01, help="history.change_alpha (default 0.01)")
    options = _common.parse_options(parser, SMOKE)
    print(_common.machine_line())
    rng = np.random.default_rng(2026)
    started = time.perf_counter()
    alarms = sum(
        bool(change_points.find(rng.normal(1, 0.02, options.studies), options.alpha)) for _ in range(options.series)
    )
    per_series_ms = 1000 * (time.perf_counter() - started) / options.series
    print(
        f"noise only, {options.studies} studies, 2% noise: a change in {alarms} of {options.series} series "
        f"({alarms / options.series:.2%}; alpha {options.alpha:g})"
    )
    for noise in options.noise:
        found = 0
        for _ in range(options.trials):
            values = rng.normal(1, noise, options.studies)
            values[options.at - 1 :] *= 1 - options.drop
            found += [change.index for change in change_points.find(values, options.alpha)] == [options.at - 1]
        print(
            f"a {options.drop:.0%} drop from study {options.at} of {options.studies}, {noise:.0%} noise: found there "
            f"alone in {found} of {options.trials} ({found / options.trials:.0%})"
        )
    print(f"search: {per_series_ms:.2f} ms per noise-only series ({change_points.PERMUTATIONS} permutations)")


if __name__ == "__main__":
    main()
