"""LeakyReLU with slope 0.01, on an fp32 tensor of shape (8192, 8192): 256 MiB in, 256 MiB out.

Suite problem, elementwise family (KernelBench level 1 #20: the slope is a constructor argument
with a default, and get_init_inputs() passes nothing).
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """Applies LeakyReLU(negative_slope) to every element."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
