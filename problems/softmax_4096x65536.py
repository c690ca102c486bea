"""Row softmax, torch.softmax(x, dim=1), on an fp32 tensor of shape (4096, 65536)."""

import torch
import torch.nn as nn

batch_size = 4096
dim = 65536


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
