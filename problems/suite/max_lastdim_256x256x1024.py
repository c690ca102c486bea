"""Max over the last dim, torch.max(x, dim=2)[0], of an fp32 tensor of shape (256, 256, 1024).

Suite problem, reduction family (KernelBench level 1 #49). 256 MiB in, 256 KiB out.
"""

import torch
import torch.nn as nn

batch_size = 256
dim1 = 256
dim2 = 1024
reduce_dim = 2


class Model(nn.Module):
    """Takes the maximum over dimension ``dim`` (the values, not the indices)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim)[0]


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
