"""RMS normalisation over the last dim of an fp32 tensor of shape (8192, 8192), as LLMs write it (no weight).

Suite problem, RMSNorm family: x * rsqrt(mean(x * x over the last dim) + eps), eps = 1e-6, 8192 rows
of 32 KiB. 256 MiB in, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 8192
hidden = 8192


class Model(nn.Module):
    """Scales each row by the reciprocal of its root mean square."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)


def get_inputs():
    x = torch.randn(batch_size, hidden)
    return [x]


def get_init_inputs():
    return []
