"""How a cell's ranks are started: SLURM resources, the launcher, a rank's place, Horovod under srun."""
