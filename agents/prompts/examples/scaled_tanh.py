"""The worked example's problem: a learned scale and shift per feature, then tanh."""

import torch
import torch.nn as nn

batch_size = 256
features = 1000


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.weight + self.bias)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
