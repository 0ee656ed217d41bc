"""Live curves (summaries.py): which tags an epoch record gives, and what the writer is fed.

The frameworks' writers themselves run in tests/integration/test_tensorboard.py, in real cells.
"""

from __future__ import annotations

from scalebench.train import metrics, summaries


class RecordingWriter:
    """An EpochWriter that keeps what it is given (the real ones write event files)."""

    def __init__(self, folder=None) -> None:
        self.folder = folder
        self.points: list[tuple[int, dict[str, float]]] = []
        self.closed = 0

    def write(self, scalars: dict[str, float], step: int) -> None:
        self.points.append((step, scalars))

    def close(self) -> None:
        self.closed += 1


def epoch(number: int, **fields) -> dict:
    record = {"type": "epoch", "epoch": number, "loss": 0.5, "lr": 1e-3, "images_per_s": 40.0}
    record.update(epoch_time_s=2.0, data_wait_s=0.5, val_loss=None, val_iou=None)
    return {**record, **fields}


def test_an_epoch_without_evaluation_gives_the_training_curves():
    assert summaries.scalars(epoch(1)) == {
        "loss/train": 0.5,
        "learning_rate": 1e-3,
        "throughput/images_per_s": 40.0,
        "data_wait/share": 0.25,
    }


def test_the_validation_is_tagged_as_such_and_only_in_the_epochs_that_evaluate():
    record = epoch(2, val_loss=0.3, val_iou=0.7)
    scalars = summaries.scalars(record)
    assert scalars["iou/validation"] == 0.7 and scalars["loss/validation"] == 0.3
    assert not {tag for tag in scalars if tag.startswith("iou/") and tag != "iou/validation"}
    assert "iou/validation" not in summaries.scalars(epoch(1))


def test_metrics_writer_feeds_its_epoch_records_a_resume_s_earlier_ones_first(tmp_path):
    writer = RecordingWriter()
    curves = summaries.Curves(writer)
    log = metrics.MetricsWriter(tmp_path / "metrics.jsonl", enabled=True, previous=[epoch(1)], curves=curves)
    log.write(epoch(2, loss=0.25))
    log.close_curves()
    log.write({"type": "final", "status": "ok"})  # after the epochs: nothing more to the curves
    log.close_curves()
    assert [step for step, _ in writer.points] == [1, 2]
    assert writer.points[1][1]["loss/train"] == 0.25
    assert writer.closed == 1


def test_start_removes_an_earlier_run_s_curves_and_opens_a_writer_only_when_asked(tmp_path):
    stale = tmp_path / "tensorboard" / "events.out.tfevents.1.earlier"
    stale.parent.mkdir()
    stale.write_bytes(b"")
    assert summaries.start(tmp_path, False, RecordingWriter) is None
    assert not stale.parent.exists()
    stale.parent.mkdir()
    stale.write_bytes(b"")
    curves = summaries.start(tmp_path, True, RecordingWriter)
    assert curves is not None and curves.writer.folder == tmp_path / "tensorboard"
    assert not stale.exists()
