"""Small sum over dim 1 of an fp32 tensor of shape (32, 512, 64), keeping the dim (KernelBench level 1 #47 style).

The reduced dim is not the innermost one: its 512 values for one output are 64 floats (256 bytes) apart.
A CPU-sized twin of the suite's reductions.
"""

import torch
import torch.nn as nn

batch_size = 32
dim1 = 512
dim2 = 64
reduce_dim = 1


class Model(nn.Module):
    """Sums over dimension ``dim``, keeping it as size 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
