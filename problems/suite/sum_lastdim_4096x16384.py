"""Sum over the last dim, torch.sum(x, dim=1, keepdim=True), of an fp32 tensor of shape (4096, 16384).

Suite problem, reduction family (KernelBench level 1 #47: the dim comes through get_init_inputs()).
256 MiB in, 16 KiB out: all the time is reading the input once.
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384
reduce_dim = 1


class Model(nn.Module):
    """Sums over dimension ``dim``, keeping it as size 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [reduce_dim]
