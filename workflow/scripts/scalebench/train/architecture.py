"""The UNet that both frameworks build (torch/model.py, tf/model.py): the shared numbers.

Encoder widths 8-16-32-64-128, each level two 3x3 convolutions (no bias with
batch norm), batch norm, ReLU, 2x2 max-pooling between levels; a decoder of
2x2 stride-2 transposed convolutions, skip connections by concatenation, the
same double convolution, and a 1x1 head with one output channel (logits).
"""

CHANNELS = (8, 16, 32, 64, 128)
BN_EPS = 1e-5
BN_MOMENTUM = 0.1  # PyTorch's convention: the new batch's weight (Keras' momentum is 1 - this)
