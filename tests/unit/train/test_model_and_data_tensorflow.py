"""The Keras UNet matches the PyTorch one; tf.data follows DistributedSampler's order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import torch
import yaml
from conftest import REPO, sb_config
from scalebench import architecture
from scalebench.measures import batches_per_epoch
from scalebench.train.tf import data as tf_data
from scalebench.train.tf import model as tf_model
from scalebench.train.torch import data as torch_data
from scalebench.train.torch import model as torch_model
from torch.utils.data import DistributedSampler


def configured_image_size() -> tuple[int, int]:
    config = sb_config.validate(
        yaml.safe_load((REPO / "config" / "config.yaml").read_text()),
        sb_config.load_schema(REPO / "config" / "schema.yaml"),
    )
    return tuple(config["dataset"]["image_size"])


@pytest.mark.parametrize("batch_norm", [True, False])
def test_keras_unet_has_the_pytorch_parameter_count_and_output_shape(batch_norm):
    height, width = configured_image_size()
    keras_model = tf_model.build_unet((height, width), batch_norm=batch_norm)
    torch_unet = torch_model.UNet(batch_norm=batch_norm)
    assert tf_model.parameter_count(keras_model) == torch_model.parameter_count(torch_unet)
    if batch_norm:
        assert tf_model.parameter_count(keras_model) == 486409
    torch_out = torch_unet(torch.zeros(2, 1, height, width)).shape  # channels first
    keras_out = keras_model(np.zeros((2, height, width, 1), np.float32)).shape  # channels last
    assert (torch_out[0], torch_out[2], torch_out[3], torch_out[1]) == tuple(keras_out) == (2, height, width, 1)


@pytest.mark.parametrize(("width", "millions"), [(1, 0.49), (4, 7.8), (16, 124)])
def test_both_frameworks_build_the_same_unet_at_every_model_width(width, millions):
    channels = architecture.channels(width)
    keras_model = tf_model.build_unet((32, 48), channels=channels)
    torch_unet = torch_model.UNet(channels=channels)
    count = architecture.parameter_count(width)
    assert tf_model.parameter_count(keras_model) == torch_model.parameter_count(torch_unet) == count
    assert count == pytest.approx(millions * 1e6, rel=0.02)
    # tensor by tensor (the layouts differ: NCHW kernels against HWCN ones), and the bytes a step reduces
    keras_sizes = sorted(int(v.shape.num_elements()) for v in keras_model.trainable_variables)
    assert keras_sizes == sorted(p.numel() for p in torch_unet.parameters())
    assert tf_model.gradient_bytes(keras_model) == torch_model.gradient_bytes(torch_unet) == 4 * count
    assert architecture.gradient_bytes(width) == 4 * count


def test_batch_norm_layers_update_their_statistics_alike():
    # Keras weighs the old running value by momentum, PyTorch the new batch's value
    keras_bn = [layer for layer in tf_model.build_unet((32, 48)).layers if "_bn" in layer.name]
    torch_bn = [m for m in torch_model.UNet().modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(keras_bn) == len(torch_bn) == 18
    assert {(layer.momentum, layer.epsilon) for layer in keras_bn} == {(0.9, 1e-5)}
    assert {(m.momentum, m.eps) for m in torch_bn} == {(0.1, 1e-5)}


def test_initial_weights_follow_pytorch_bounds():
    model = tf_model.build_unet((32, 48))
    kernel = model.get_layer("down1_conv1").kernel.numpy()  # 3x3, 8 -> 16 channels: fan-in 72
    assert np.abs(kernel).max() <= 1 / math.sqrt(72) + 1e-7
    assert np.abs(kernel).max() > 0.8 / math.sqrt(72)


@pytest.mark.parametrize("n", [1, 7, 32, 33])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_randperm_reimplementation_is_torchs(n, seed):
    generator = torch.Generator()
    generator.manual_seed(seed)
    assert tf_data.torch_randperm(n, seed).tolist() == torch.randperm(n, generator=generator).tolist()


@pytest.mark.parametrize("n, world", [(32, 1), (32, 2), (33, 2), (10, 4), (3, 4)])
@pytest.mark.parametrize("epoch", [0, 3])
def test_shard_order_equals_distributed_sampler(n, world, epoch):
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=7, drop_last=False)
        sampler.set_epoch(epoch)
        assert tf_data.distributed_order(n, world, rank, seed=7, epoch=epoch) == list(sampler)


@pytest.mark.parametrize(("n", "world", "batches"), [(30, 3, 2), (30, 3, 7), (10, 4, 5), (33, 2, 40)])
def test_a_cycled_shard_is_the_same_in_both_frameworks_samplers(n, world, batches):
    # training.steps_per_epoch: more (or fewer) batches than one pass, the shard repeated in its order
    for rank in range(world):
        for epoch in (0, 4):
            shards = torch_data.ReplicaShards(range(n), world, [rank], seed=5, batch=3, batches=batches)
            shards.set_epoch(epoch)
            tf_order = tf_data.replica_shard(list(range(n)), world, rank, seed=5, epoch=epoch, samples=3 * batches)
            assert list(shards) == tf_order.tolist() and len(tf_order) == 3 * batches
            one_pass = tf_data.distributed_order(n, world, rank, seed=5, epoch=epoch)
            assert tf_order.tolist() == (one_pass * batches)[: 3 * batches]


def test_train_batches_are_the_shard_in_order_and_drop_the_remainder(prepared_data):
    images, _, manifest = tf_data.load_arrays(prepared_data)
    train = manifest["train"]
    batches = batches_per_epoch(len(train), 2, 5)
    order = tf_data.ReplicaShards(train, 2, [1], seed=1, batch=5, batches=batches)
    dataset = tf_data.train_dataset(str(prepared_data), order, epoch=2, threads=1)
    batches = list(dataset)
    expected = [train[p] for p in tf_data.distributed_order(len(train), 2, 1, 1, 2)]
    assert len(batches) == len(expected) // 5
    for step, ((image, mask),) in enumerate(batches):
        rows = expected[step * 5 : step * 5 + 5]
        assert image.dtype == tf.uint8 and mask.dtype == tf.uint8  # converted in the step, on its device
        np.testing.assert_array_equal(image.numpy(), images[rows])
        inputs, targets = tf_data.model_inputs(image, mask, image_size=(32, 48))
        np.testing.assert_array_equal(inputs.numpy()[..., 0], images[rows].astype(np.float32) / np.float32(255))
        assert set(np.unique(targets.numpy())) <= {0.0, 1.0}


@pytest.mark.parametrize("replica_ids", [[0], [0, 1]])
def test_device_placement_gives_the_host_pipelines_inputs_bit_for_bit(prepared_data, replica_ids):
    train = tf_data.load_arrays(prepared_data)[2]["train"] * 2
    batches = batches_per_epoch(len(train), 2, 4)
    order = tf_data.ReplicaShards(train, 2, replica_ids, seed=3, batch=4, batches=batches)
    stores = [tf_data.DeviceSamples(str(prepared_data), s, "/cpu:0") for s in order.replica_samples(epochs=3)]
    for epoch in range(3):
        host = list(tf_data.train_dataset(str(prepared_data), order, epoch, threads=1))
        device = list(tf_data.device_train_batches(stores, order, epoch))
        assert len(device) == len(host) > 0
        for device_step, host_step in zip(device, host, strict=True):
            assert len(device_step) == len(host_step) == len(replica_ids)
            for gathered, batch in zip(device_step, host_step, strict=True):
                pairs = zip(
                    tf_data.model_inputs(*gathered, image_size=(32, 48)),
                    tf_data.model_inputs(*batch, image_size=(32, 48)),
                    strict=True,
                )
                for ours, theirs in pairs:
                    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_device_samples_refuse_a_sample_they_did_not_load(prepared_data):
    store = tf_data.DeviceSamples(str(prepared_data), [3, 1, 2], "/cpu:0")
    assert store.nbytes == 3 * 2 * 32 * 48
    # uint8 bytes as float32 words (TensorFlow gathers no uint8 on GPUs), back bit for bit
    assert store.images.dtype == tf.float32 and store.images.shape == (3, 32 * 48 // 4)
    images = tf_data.load_arrays(prepared_data)[0]
    np.testing.assert_array_equal(tf_data.from_words(store.images, (32, 48)).numpy(), images[[1, 2, 3]])
    with pytest.raises(KeyError, match=r"samples \[0\] were not loaded"):
        store.rows(np.array([1, 0]))


def test_batches_prefetched_to_a_device_are_the_same_batches_on_that_device(prepared_data):
    train = tf_data.load_arrays(prepared_data)[2]["train"]
    order = tf_data.ReplicaShards(train, 1, [0], seed=3, batch=4, batches=batches_per_epoch(len(train), 1, 4))
    on_host = list(tf_data.train_dataset(str(prepared_data), order, epoch=0, threads=1))
    on_device = list(tf_data.train_dataset(str(prepared_data), order, epoch=0, threads=1, device="/cpu:0"))
    assert len(on_device) == len(on_host) > 0
    for ((image, mask),), ((host_image, host_mask),) in zip(on_device, on_host, strict=True):
        assert image.device.endswith("device:CPU:0")  # on a GPU: the rank's GPU, copied ahead of the step
        np.testing.assert_array_equal(image.numpy(), host_image.numpy())
        np.testing.assert_array_equal(mask.numpy(), host_mask.numpy())


def test_evaluation_shards_cover_the_test_set_once(prepared_data):
    _, _, manifest = tf_data.load_arrays(prepared_data)
    test = manifest["test"] + [manifest["train"][0]]  # an odd count: uneven shards
    seen = []
    for rank in range(2):
        for images, _ in tf_data.eval_dataset(str(prepared_data), test[rank::2], batch=3, threads=1):
            seen.append(images.shape[0])
    assert sum(seen) == len(test)
