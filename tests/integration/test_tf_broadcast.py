"""TensorFlow's strategies set every replica's non-trainable variables (batch-norm statistics, on-read
variables: each replica holds its own copy) to replica 0's after each epoch, with one traced
function per set of variables, however many epochs ask: Keras hands out a new list of the same
variables at each call, and a function traced per list cost about a second at every epoch."""

from __future__ import annotations

import pytest
from conftest import in_fresh_process

ENVIRONMENT = "tensorflow"

pytestmark = pytest.mark.integration


def test_a_broadcast_sets_every_replica_to_replica_0_and_is_traced_once_for_the_same_variables(
    request, tmp_path_factory
):
    if in_fresh_process(request, tmp_path_factory):  # TensorFlow fixes its devices at its first operation
        return
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from scalebench.train.rank_env import RankInfo
    from scalebench.train.tf.strategy import StrategyBackend

    strategy = tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])
    place = RankInfo(0, 0, 1, 1, "127.0.0.1", 29500, "local")
    backend = StrategyBackend(place, "cpu", False, strategy, "local")
    with strategy.scope():  # like a batch-norm statistic: one copy per replica, read as their mean
        statistic = tf.Variable(
            [0.0, 0.0],
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.MEAN,
        )

    def set_per_replica(values: list[list[float]]) -> None:
        def assign():
            context = tf.distribute.get_replica_context()
            statistic.assign(tf.gather(tf.constant(values), context.replica_id_in_sync_group))

        strategy.run(tf.function(assign))

    def per_replica() -> list[list[float]]:
        return [value.numpy().tolist() for value in strategy.experimental_local_results(statistic)]

    for epoch in range(3):
        set_per_replica([[1.0 + epoch, 2.0], [5.0, 7.0 + epoch]])
        assert per_replica() == [[1.0 + epoch, 2.0], [5.0, 7.0 + epoch]]
        backend.broadcast_from_root(list([statistic]))  # a new list each time, as Keras gives
        assert per_replica() == [[1.0 + epoch, 2.0], [1.0 + epoch, 2.0]], epoch
    traced = [function.experimental_get_tracing_count() for function in backend._broadcasts.values()]
    assert traced == [1], traced
