"""RMS normalisation over the 64 features (dim 1) of an fp32 tensor of shape (16, 64, 256, 256).

Suite problem, RMSNorm family, written as KernelBench level 1 #36 writes it: the mean of squares over
dim 1 for each of the 16 × 256 × 256 positions (64 values, 256 KiB apart), eps = 1e-5, no weight.
256 MiB in, 256 MiB out; eager runs five kernels and writes three full-size temporaries.
"""

import torch
import torch.nn as nn

batch_size = 16
features = 64
dim1 = 256
dim2 = 256


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
