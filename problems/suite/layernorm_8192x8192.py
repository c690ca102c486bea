"""LayerNorm over the last dim (8192) of an fp32 tensor of shape (8192, 8192): a transformer-style norm.

Suite problem, layernorm family: 8192 rows of 32 KiB, learnable weight and bias of shape (8192,),
eps = 1e-5 (nn.LayerNorm's default). 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 8192
hidden = 8192


class Model(nn.Module):
    """Applies nn.LayerNorm(normalized_shape) to the input."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    x = torch.randn(batch_size, hidden)
    return [x]


def get_init_inputs():
    return [(hidden,)]
