"""Argmin over dim 1 of an fp32 tensor of shape (128, 2048, 256): 2048 values per output, 256 columns inside.

Suite problem, reduction family (KernelBench level 1 #52). The output is int64 indices of shape
(128, 256). 256 MiB in, 256 KiB out.
"""

import torch
import torch.nn as nn

batch_size = 128
dim1 = 2048
dim2 = 256
reduce_dim = 1


class Model(nn.Module):
    """Returns the index of the minimum over dimension ``dim``."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=self.dim)


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
