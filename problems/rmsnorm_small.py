"""Small RMSNorm written as KernelBench level 1 #36 writes it, on an fp32 tensor of shape (8, 32, 48, 64).

The mean of squares is over dim 1 (the 32 features, 12 KiB apart) for each of the 8 × 48 × 64 positions,
eps = 1e-5, no weight. The CPU-sized twin of the suite's rmsnorm_16x64x256x256.
"""

import torch
import torch.nn as nn

batch_size = 8
features = 32
dim1 = 48
dim2 = 64


class Model(nn.Module):
    """Divides the input by the root mean square over the feature dim."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features]
