"""Argmax over the last dim, torch.argmax(x, dim=1), of an fp32 tensor of shape (8192, 8192).

Suite problem, reduction family (KernelBench level 1 #51). The output is int64 indices, compared
exactly (random normal inputs have no ties). 256 MiB in, 64 KiB out.
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 8192
reduce_dim = 1


class Model(nn.Module):
    """Returns the index of the maximum over dimension ``dim``."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [reduce_dim]
