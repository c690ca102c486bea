"""Non-square fp32 matrix multiplication, C = A @ B, with A (8192, 2048) and B (2048, 8192).

Suite problem, matmul family: a short inner dim and a large output (256 MiB), 275 GFLOP.
"""

import torch
import torch.nn as nn

M = 8192
K = 2048
N = 8192


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
