"""ReLU, torch.relu(x), on an fp32 tensor of shape (4096, 16384): 256 MiB in, 256 MiB out.

Suite problem, elementwise family (KernelBench level 1 #19 at a size that fills an H200).
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies ReLU to every element."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
