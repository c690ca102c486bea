"""Small pointwise chain on an fp32 tensor of shape (512, 4096): clamp(gelu_tanh(x) * 2 - 0.5, -1, 1).

A CPU-sized problem for the builtin team's "elementwise" family: eager torch runs four kernels (gelu, mul,
sub, clamp), each reading and writing the whole 8 MiB tensor; a fused kernel reads x once and writes once.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 512
dim = 4096


class Model(nn.Module):
    """GELU (tanh approximation), then an affine rescale and a clamp to [-1, 1]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(x, approximate="tanh")
        y = y * 2.0 - 0.5
        return torch.clamp(y, -1.0, 1.0)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
