"""Min over dim 1 of an fp32 tensor of shape (32, 4096, 512): 4096 values per output, 512 columns inside.

Suite problem, reduction family (KernelBench level 1 #53). 256 MiB in, 64 KiB out.
"""

import torch
import torch.nn as nn

batch_size = 32
dim1 = 4096
dim2 = 512
reduce_dim = 1


class Model(nn.Module):
    """Takes the minimum over dimension ``dim`` (the values, not the indices)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.min(x, dim=self.dim)[0]


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
