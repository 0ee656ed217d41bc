"""What launch.py and the ranks both read about the allocation: SLURM's variables and
commands, the ports of a cell, the network interface."""
