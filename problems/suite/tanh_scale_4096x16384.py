"""Tanh then a scale, torch.tanh(x) * scale with scale = 2.5, on an fp32 tensor of shape (4096, 16384).

Suite problem, elementwise family, KernelBench level-2 style: the scale comes through
get_init_inputs(). 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384
scale = 2.5


class Model(nn.Module):
    """Computes tanh(x) * scale for every element."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [scale]
