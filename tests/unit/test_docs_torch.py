"""The user guide's table of a cell's files names PyTorch's checkpoint as a real one is written
(test_docs.py reads the table; TensorFlow's: test_docs_tensorflow.py)."""

from __future__ import annotations

from scalebench.train.torch import checkpoint as torch_checkpoint
from test_docs import cell_files_table, listed_names

ENVIRONMENT = "torch"


def test_cell_files_table_names_pytorch_s_checkpoint(tmp_path):
    """A real PyTorch checkpoint, written into a cell folder, is what the user guide lists."""
    torch_checkpoint.Checkpoint(tmp_path, "hash").save({"epoch": 1})
    assert listed_names(tmp_path) == ["`checkpoint.pt`"]
    assert "`checkpoint.pt` (PyTorch)" in cell_files_table()
    torch_checkpoint.remove(tmp_path)  # "removed when it finishes"
    assert listed_names(tmp_path) == []
