import ctypes

import torch
import torch.nn as nn

from tools.compile import load_c

C_SRC = r"""
#include <math.h>
#include <stdint.h>

/* out[r][c] = tanh(x[r][c] * w[c] + b[c]) over a row-major (rows, cols) array; rows split over the threads. */
void scaled_tanh(const float* restrict x, const float* restrict w, const float* restrict b,
                 float* restrict out, int64_t rows, int64_t cols)
{
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* restrict xr = x + r * cols;
        float* restrict yr = out + r * cols;
        for (int64_t c = 0; c < cols; ++c) yr[c] = tanhf(xr[c] * w[c] + b[c]);
    }
}
"""

_lib = load_c(C_SRC, name="scaled_tanh")
_lib.scaled_tanh.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2
_lib.scaled_tanh.restype = None


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # The reference's names and shapes: the checker copies its weights in by name.
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.weight.contiguous(), self.bias.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        _lib.scaled_tanh(x.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr(), rows, cols)
        return out
