"""Small Linear + pointwise tail: relu(x @ W.T + b) * 2 - 0.5, x (1024, 256), W (1024, 256).

A CPU-sized problem for the builtin team's "epilogue" family: the product stays in the library (the CPU BLAS
here, cuBLAS on a GPU) and the tail (relu, mul, sub: three passes over the 4 MiB result in eager torch)
becomes one pass. The GEMM is kept short (K = 256) so the tail is a visible share of the time.
"""

import torch
import torch.nn as nn

batch_size = 1024
in_features = 256
out_features = 1024


class Model(nn.Module):
    """nn.Linear, then ReLU, then an affine rescale."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2.0 - 0.5


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
