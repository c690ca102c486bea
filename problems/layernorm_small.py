"""Small LayerNorm over the last three dims (6, 20, 24) of an fp32 tensor of shape (5, 6, 20, 24).

The CPU-sized twin of layernorm_16x64x256x256 (eps = 1e-5, nn.LayerNorm's default).
"""

import torch
import torch.nn as nn

batch_size = 5
features = 6
dim1 = 20
dim2 = 24


class Model(nn.Module):
    """Applies nn.LayerNorm(normalized_shape) to the input."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
