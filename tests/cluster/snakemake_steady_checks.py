"""`snakemake`, with the SLURM plugin asking SLURM for its jobs' states at a steady interval: the
cluster tests' Snakemake (tests/cluster/conftest.py's slurm_snakemake).

The plugin (2.8.0) waits --slurm-init-seconds-before-status-checks before its first status check,
then 10 s longer after each check that finds no job finished, up to 180 s: right for a production
cluster, whose jobs run for hours and whose controller many users ask, but on the test cluster a
cell of some 20 s was seen finished only at the check of second 36, a minute-long one at 68, and a
test's chain of jobs waited that much for every job. Here each check is followed by the first
interval again, so a job's end is seen within those few seconds. Only the wait between checks
changes: every check is the plugin's own (squeue, this cluster's MinJobAge outlasts it), and what
a check decides is the plugin's.

    python snakemake_steady_checks.py ARGS...   # as `snakemake ARGS...`
"""

from __future__ import annotations

import sys

from snakemake_executor_plugin_slurm import Executor


def steady(check_active_jobs):
    async def check_then_wait_the_first_interval_again(self, active_jobs):
        async for job in check_active_jobs(self, active_jobs):
            yield job
        self.next_seconds_between_status_checks = self.workflow.executor_settings.init_seconds_before_status_checks

    return check_then_wait_the_first_interval_again


if __name__ == "__main__":
    Executor.check_active_jobs = steady(Executor.check_active_jobs)
    from snakemake.cli import main

    sys.argv[0] = "snakemake"
    sys.exit(main())
