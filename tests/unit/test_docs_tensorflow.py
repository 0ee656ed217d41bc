"""The user guide's table of a cell's files names TensorFlow's checkpoint as a real one is written
(test_docs.py reads the table; PyTorch's: test_docs_torch.py)."""

from __future__ import annotations

import tensorflow as tf
from scalebench.train.tf import checkpoint as tf_checkpoint
from test_docs import cell_files_table, listed_names

ENVIRONMENT = "tensorflow"


def test_cell_files_table_names_tensorflow_s_checkpoint(tmp_path):
    """A real TensorFlow checkpoint, written into a cell folder, is what the user guide lists."""
    tf_checkpoint.Checkpoint(tmp_path, "hash", {"step": tf.Variable(1)}, writes=True, participates=False).save({}, 1)
    assert listed_names(tmp_path) == ["`checkpoint/`"]
    table = cell_files_table()
    assert "`checkpoint/` (TensorFlow" in table
    assert "`ckpt-EPOCH.*`" in table and list((tmp_path / "checkpoint").glob("ckpt-1.*"))
    tf_checkpoint.remove(tmp_path)  # "removed when it finishes"
    assert listed_names(tmp_path) == []
