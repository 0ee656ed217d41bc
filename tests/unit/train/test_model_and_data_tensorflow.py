"""The Keras UNet is the architecture's (scalebench/architecture.py), tensor for tensor PyTorch's;
tf.data follows DistributedSampler's order. PyTorch's side of each comparison is computed by
PyTorch itself in its own environment (TORCH_SIDE: one process per run); its UNet against the
architecture: test_model_and_data_torch.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import configured_image_size, in_framework, made_once
from scalebench import architecture
from scalebench.measures import batches_per_epoch
from scalebench.train.tf import data as tf_data
from scalebench.train.tf import model as tf_model

ENVIRONMENT = "tensorflow"

WIDTHS = [(1, 0.49), (4, 7.8), (16, 124)]  # (model.width, millions of parameters)
RANDPERMS = [(n, seed) for n in (1, 7, 32, 33) for seed in (0, 1, 12345)]
SAMPLERS = [(32, 1), (32, 2), (33, 2), (10, 4), (3, 4)]  # (samples, replicas)
CYCLED = [(30, 3, 2), (30, 3, 7), (10, 4, 5), (33, 2, 40)]  # (samples, replicas, batches of 3)

# PyTorch's answers to what these tests ask of TensorFlow's model and data, in torch's environment:
# its UNet's parameter tensors at each width (built on the meta device: sizes, no memory), torch.randperm
# with a seeded generator, DistributedSampler's shard of each rank (seed 7), and torch/data.py's
# ReplicaShards cycled to a number of batches (seed 5, batches of 3)
TORCH_SIDE = """
import json, sys
import torch
from torch.utils.data import DistributedSampler
from scalebench import architecture
from scalebench.train.torch import data, model

widths, randperms, samplers, cycled = json.loads(sys.argv[1])
with torch.device("meta"):
    sizes = {w: sorted(p.numel() for p in model.UNet(channels=architecture.channels(w)).parameters()) for w in widths}
perms = {}
for n, seed in randperms:
    generator = torch.Generator()
    generator.manual_seed(seed)
    perms[f"{n},{seed}"] = torch.randperm(n, generator=generator).tolist()
orders = {}
for n, world in samplers:
    for rank in range(world):
        for epoch in (0, 3):
            sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=7, drop_last=False)
            sampler.set_epoch(epoch)
            orders[f"{n},{world},{rank},{epoch}"] = list(sampler)
shards = {}
for n, world, batches in cycled:
    for rank in range(world):
        for epoch in (0, 4):
            replica = data.ReplicaShards(range(n), world, [rank], seed=5, batch=3, batches=batches)
            replica.set_epoch(epoch)
            shards[f"{n},{world},{rank},{batches},{epoch}"] = list(replica)
print(json.dumps({"sizes": sizes, "randperms": perms, "samplers": orders, "shards": shards}))
"""


@pytest.fixture(scope="session")
def torch_side(tmp_path_factory) -> dict:
    """PyTorch's answers (TORCH_SIDE), once per run for every test here, whichever worker runs it."""

    def make(folder: Path) -> None:
        asked = [[width for width, _ in WIDTHS], RANDPERMS, SAMPLERS, CYCLED]
        (folder / "torch.json").write_text(json.dumps(in_framework("torch", TORCH_SIDE, json.dumps(asked))))

    return json.loads((made_once(tmp_path_factory, "torch-side-of-tf-model-and-data", make) / "torch.json").read_text())


@pytest.mark.parametrize("batch_norm", [True, False])
def test_keras_unet_has_the_architecture_s_parameter_count_and_output_shape(batch_norm):
    height, width = configured_image_size()
    keras_model = tf_model.build_unet((height, width), batch_norm=batch_norm)
    # the architecture's count, which PyTorch's UNet has too (test_model_and_data_torch.py)
    assert tf_model.parameter_count(keras_model) == architecture.parameter_count(1, batch_norm)
    if batch_norm:
        assert tf_model.parameter_count(keras_model) == 486409
    keras_out = keras_model(np.zeros((2, height, width, 1), np.float32)).shape  # channels last
    assert tuple(keras_out) == (2, height, width, 1)  # PyTorch's, channels first: (2, 1, height, width)


@pytest.mark.parametrize(("width", "millions"), WIDTHS)
def test_keras_builds_pytorch_s_unet_at_every_model_width(width, millions, torch_side):
    channels = architecture.channels(width)
    keras_model = tf_model.build_unet((32, 48), channels=channels)
    count = architecture.parameter_count(width)
    assert tf_model.parameter_count(keras_model) == count  # PyTorch's too (test_model_and_data_torch.py)
    assert count == pytest.approx(millions * 1e6, rel=0.02)
    # tensor by tensor (the layouts differ: NCHW kernels against HWCN ones), and the bytes a step reduces
    keras_sizes = sorted(int(v.shape.num_elements()) for v in keras_model.trainable_variables)
    assert keras_sizes == torch_side["sizes"][str(width)]
    assert tf_model.gradient_bytes(keras_model) == 4 * count
    assert architecture.gradient_bytes(width) == 4 * count


def test_batch_norm_layers_update_their_statistics_as_pytorch_s():
    # Keras weighs the old running value by momentum, PyTorch (and the architecture) the new batch's value
    keras_bn = [layer for layer in tf_model.build_unet((32, 48)).layers if "_bn" in layer.name]
    assert len(keras_bn) == 18  # as PyTorch's BatchNorm2d layers (test_model_and_data_torch.py)
    assert {(layer.momentum, layer.epsilon) for layer in keras_bn} == {(0.9, 1e-5)}
    assert (0.9, 1e-5) == (1 - architecture.BN_MOMENTUM, architecture.BN_EPS)


def test_initial_weights_follow_pytorch_bounds():
    model = tf_model.build_unet((32, 48))
    kernel = model.get_layer("down1_conv1").kernel.numpy()  # 3x3, 8 -> 16 channels: fan-in 72
    assert np.abs(kernel).max() <= 1 / math.sqrt(72) + 1e-7
    assert np.abs(kernel).max() > 0.8 / math.sqrt(72)


@pytest.mark.parametrize(("n", "seed"), RANDPERMS)
def test_randperm_reimplementation_is_torchs(n, seed, torch_side):
    assert tf_data.torch_randperm(n, seed).tolist() == torch_side["randperms"][f"{n},{seed}"]


@pytest.mark.parametrize(("n", "world"), SAMPLERS)
@pytest.mark.parametrize("epoch", [0, 3])
def test_shard_order_equals_distributed_sampler(n, world, epoch, torch_side):
    for rank in range(world):
        order = tf_data.distributed_order(n, world, rank, seed=7, epoch=epoch)
        assert order == torch_side["samplers"][f"{n},{world},{rank},{epoch}"]


@pytest.mark.parametrize(("n", "world", "batches"), CYCLED)
def test_a_cycled_shard_is_the_same_in_both_frameworks_samplers(n, world, batches, torch_side):
    # training.steps_per_epoch: more (or fewer) batches than one pass, the shard repeated in its order
    for rank in range(world):
        for epoch in (0, 4):
            tf_order = tf_data.replica_shard(list(range(n)), world, rank, seed=5, epoch=epoch, samples=3 * batches)
            assert torch_side["shards"][f"{n},{world},{rank},{batches},{epoch}"] == tf_order.tolist()
            assert len(tf_order) == 3 * batches
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
