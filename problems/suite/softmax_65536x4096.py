"""Row softmax, torch.softmax(x, dim=1), on an fp32 tensor of shape (65536, 4096): 1 GiB in, 1 GiB out.

Suite problem, softmax family: many short rows (one row is 16 KiB), where the research problem
(4096, 65536) has few long ones. Degenerate under the relaxed tolerance like it (every output is
near 1/4096), so candidates are also held to tracking the output's variation.
"""

import torch
import torch.nn as nn

batch_size = 65536
dim = 4096


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
