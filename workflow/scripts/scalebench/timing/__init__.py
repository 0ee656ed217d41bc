"""A cell's time: its epochs read from its records and the model of epoch time against GPUs.

Both the planner (config/bill.py: what a study will cost, and each cell's SLURM time limit) and the
analysis (runs.csv, scaling.csv) read a cell's time the same way, so they live below both:

- step_split.py: the step split of a cell's epoch records (the critical path among them);
- cell_times.py: the time figures of one cell (epochs, steady epoch, start-up, run time) from its records;
- scaling_model.py: epoch time against GPU count fitted per series (numpy, pandas and scipy only).
"""
