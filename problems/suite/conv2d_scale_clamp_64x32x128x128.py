"""Conv2d 32→64 channels, 3×3 with padding 1, then a scale and a clamp to [-1, 1], on an input (64, 32, 128, 128).

Suite problem, KernelBench level-2 style (a convolution with an elementwise tail): the scale and the
clamp bounds come through get_init_inputs(). 128 MiB in, 256 MiB out, 39 GFLOP.
"""

import torch
import torch.nn as nn

batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
scale = 0.25
clamp_min = -1.0
clamp_max = 1.0


class Model(nn.Module):
    """A convolution, then multiplies by a constant and clamps to [clamp_min, clamp_max]."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, scale: float, clamp_min: float, clamp_max: float
    ):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = x * self.scale
        x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)
        return x


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale, clamp_min, clamp_max]
