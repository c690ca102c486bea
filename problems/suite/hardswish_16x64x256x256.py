"""HardSwish, torch.nn.functional.hardswish(x), on an fp32 tensor of shape (16, 64, 256, 256).

Suite problem, elementwise family: 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 16
features = 64
dim1 = 256
dim2 = 256


class Model(nn.Module):
    """Applies HardSwish to every element."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardswish(x)


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
