"""Linear without bias, then a bias add and ReLU: relu(x @ W.T + b), x (8192, 4096), W (4096, 4096).

Suite problem, level-2 style (KernelBench level 2 #76, Gemm_Add_ReLU): a matmul with an elementwise
tail that eager runs as two more passes over the 128 MiB output; 275 GFLOP.
"""

import torch
import torch.nn as nn

batch_size = 8192
in_features = 4096
out_features = 4096
bias_shape = (out_features,)


class Model(nn.Module):
    """Linear (no bias), then adds a learnable bias and applies ReLU."""

    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        x = torch.relu(x)
        return x


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
