"""LayerNorm over the last two dims (1024, 2048) of an fp32 tensor of shape (32, 1024, 2048).

Suite problem, layernorm family: few long rows (32 rows of 2 Mi elements, 8 MiB each), so one block
per row leaves most of the GPU idle; weight and bias of shape (1024, 2048). 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 32
dim1 = 1024
dim2 = 2048


class Model(nn.Module):
    """Applies nn.LayerNorm(normalized_shape) to the input."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(dim1, dim2)]
