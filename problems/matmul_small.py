"""Small fp32 matrix multiplication, C = A @ B, with A (200, 136) and B (136, 264).

The CPU-sized twin of matmul_4096: non-square, and no size is a multiple of 16, so tiled kernels
must handle partial tiles.
"""

import torch
import torch.nn as nn

M = 200
K = 136
N = 264


class Model(nn.Module):
    """Computes C = A @ B for A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
