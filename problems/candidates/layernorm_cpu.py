"""LayerNorm on the CPU: a two-pass C kernel (mean, then variance, in double), OpenMP over rows.

A row is the trailing prod(normalized_shape) elements; y = (x - mean) / sqrt(var + eps) * w + b.
"""

import ctypes
import math

import torch
import torch.nn as nn

from tools.compile import load_c

C_SRC = r"""
#include <math.h>
#include <stdint.h>

void layernorm_rows(const float* restrict x, const float* restrict weight, const float* restrict bias,
                    float* restrict y, int64_t rows, int64_t cols, float eps)
{
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* restrict xr = x + r * cols;
        float* restrict yr = y + r * cols;
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) sum += xr[j];
        const double mean = sum / (double)cols;
        double sq = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
            const double d = xr[j] - mean;
            sq += d * d;
        }
        const float rstd = (float)(1.0 / sqrt(sq / (double)cols + eps));  /* biased variance */
        const float fmean = (float)mean;
        for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - fmean) * rstd * weight[j] + bias[j];
    }
}
"""

_lib = load_c(C_SRC, name="layernorm")
_lib.layernorm_rows.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_float]
_lib.layernorm_rows.restype = None
EPS = 1e-5  # nn.LayerNorm's default, which the problem uses


class _Affine(nn.Module):
    """Holds the learnable weight and bias, initialised like nn.LayerNorm (ones / zeros)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))


class ModelNew(nn.Module):
    """LayerNorm over the trailing ``normalized_shape`` dims, same constructor as the problem's Model."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        # Parameters live in a submodule named `ln`, so the state_dict keys are `ln.weight` and
        # `ln.bias`, exactly the reference's (whose nn.LayerNorm is `self.ln`).
        self.ln = _Affine(self.normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CPU tensor, got {x.dtype} on {x.device}")
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k :]) != self.normalized_shape:
            raise ValueError(f"input {tuple(x.shape)} does not end in {self.normalized_shape}")
        x = x.contiguous()
        weight, bias = self.ln.weight.detach().contiguous(), self.ln.bias.detach().contiguous()
        y = torch.empty_like(x)
        cols = math.prod(self.normalized_shape)
        rows = x.numel() // cols if cols else 0
        _lib.layernorm_rows(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), rows, cols, EPS)
        return y
