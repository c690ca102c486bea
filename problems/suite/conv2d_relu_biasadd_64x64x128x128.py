"""Conv2d 64→128 channels, 3×3, then ReLU, then a per-channel bias add, on an input of shape (64, 64, 128, 128).

Suite problem, level-2 style, written as KernelBench level 2 #1 (Conv2D_ReLU_BiasAdd) writes it: no
padding, so the output is (64, 128, 126, 126) (496 MiB); 150 GFLOP. 256 MiB in.
"""

import torch
import torch.nn as nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)


class Model(nn.Module):
    """A convolution, a ReLU, then a learnable bias added per output channel."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
