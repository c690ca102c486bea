"""Row log-softmax, torch.log_softmax(x, dim=1), on an fp32 tensor of shape (16384, 8192).

Suite problem, softmax family (KernelBench level 1 #24: the dim is a constructor argument with a
default). 512 MiB in, 512 MiB out.
"""

import torch
import torch.nn as nn

batch_size = 16384
dim = 8192


class Model(nn.Module):
    """Applies log-softmax over dimension ``dim``."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
