"""Row softmax over long rows, torch.softmax(x, dim=1), on an fp32 tensor of shape (32, 32768).

A CPU-sized problem with rows as long as those of softmax_4096x65536, and degenerate like it under
the relaxed 1e-2 tolerance: every output value is below 0.01, so an all-zero answer would pass the
tolerance. kforge warns about that and holds kernels to tracking the output's variation.
"""

import torch
import torch.nn as nn

batch_size = 32
dim = 32768


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
