"""LayerNorm over the last three dims (64, 256, 256) of an fp32 tensor of shape (16, 64, 256, 256).

Each of the 16 rows of 4 Mi elements is normalised with its own mean and variance, then scaled and
shifted by a learnable weight and bias of shape (64, 256, 256) (eps = 1e-5, nn.LayerNorm's default).
"""

import torch
import torch.nn as nn

batch_size = 16
features = 64
dim1 = 256
dim2 = 256


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
