"""The training record of TensorFlow's MultiWorkerMirrored backend: exactly the definitions' fields
(records/definitions.py), with test_records.py's checks."""

from __future__ import annotations

import tensorflow as tf
from scalebench.train.tf.native import MultiWorkerBackend
from test_records import assert_the_training_record_is_the_defined_settings_and_the_backends_options

ENVIRONMENT = "tensorflow"


def test_the_multiworker_training_record_is_the_defined_settings_and_the_backends_options():
    # around the default strategy: its options need no workers
    assert_the_training_record_is_the_defined_settings_and_the_backends_options(
        "tensorflow",
        "native",
        lambda place, training: MultiWorkerBackend(place, "cpu", False, tf.distribute.get_strategy(), "RING"),
    )
