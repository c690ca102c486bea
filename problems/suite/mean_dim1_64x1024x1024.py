"""Mean over dim 1 of an fp32 tensor of shape (64, 1024, 1024): a reduction with 1024 contiguous columns inside.

Suite problem, reduction family (KernelBench level 1 #48). The reduced dim is not the innermost one,
so a kernel must read 1024 strided rows per output row. 256 MiB in, 256 KiB out.
"""

import torch
import torch.nn as nn

batch_size = 64
dim1 = 1024
dim2 = 1024
reduce_dim = 1


class Model(nn.Module):
    """Takes the mean over dimension ``dim``."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
