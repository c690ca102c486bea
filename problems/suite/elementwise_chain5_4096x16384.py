"""A chain of five elementwise ops, tanh(relu(x * 2 + 1)) * 0.5, on an fp32 tensor of shape (4096, 16384).

Suite problem, elementwise family: eager runs five passes over 256 MiB (each writing a 256 MiB
temporary); one fused kernel reads 256 MiB and writes 256 MiB once.
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Multiply, add, ReLU, tanh, multiply: five elementwise ops in a row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * 2.0
        x = x + 1.0
        x = torch.relu(x)
        x = torch.tanh(x)
        return x * 0.5


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
