"""Linear (with bias), GELU, then a scale: gelu(x @ W.T + b) * 0.5, x (8192, 2048), W (8192, 2048).

Suite problem, KernelBench level-2 style (a matmul with an activation-and-scale tail, like #86
Matmul_Divide_GELU): the scale comes through get_init_inputs(); 275 GFLOP and a 256 MiB output that
eager reads and writes twice more.
"""

import torch
import torch.nn as nn

batch_size = 8192
in_features = 2048
out_features = 8192
scaling_factor = 0.5


class Model(nn.Module):
    """Linear, then GELU, then multiplies by a constant factor."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.matmul(x)
        x = torch.nn.functional.gelu(x)
        x = x * self.scaling_factor
        return x


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
