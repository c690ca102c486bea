"""Small row softmax, torch.softmax(x, dim=1), on an fp32 tensor of shape (96, 3000).

The CPU-sized twin of softmax_4096x65536.
"""

import torch
import torch.nn as nn

batch_size = 96
dim = 3000


class Model(nn.Module):
    """Applies softmax over dim 1 of a (batch_size, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
