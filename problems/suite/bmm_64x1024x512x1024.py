"""Batched fp32 matrix multiplication, C = torch.bmm(A, B), A (64, 1024, 512) and B (64, 512, 1024).

Suite problem, matmul family (KernelBench level 1 #3): 64 independent products, 69 GFLOP, 256 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 64
m = 1024
k = 512
n = 1024


class Model(nn.Module):
    """Computes C[b] = A[b] @ B[b] for every batch index b."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []
