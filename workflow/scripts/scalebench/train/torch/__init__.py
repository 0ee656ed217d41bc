"""PyTorch: the framework's side of the training contract and its backends (DDP, Horovod)."""
