"""Swish (SiLU written out), x * torch.sigmoid(x), on an fp32 tensor of shape (4096, 16384).

Suite problem, elementwise family (KernelBench level 1 #25): two aten ops that eager runs as two
passes over memory, 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Computes x * sigmoid(x) for every element."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
