"""fp32 matmul C = A @ B on the CPU: a cache-blocked C kernel, OpenMP over output tiles.

Each (32-row, 256-column) tile of C is owned by one thread, which walks K in blocks of 128 with an
i-k-j loop whose innermost loop over columns the compiler vectorises. fp32 accumulation, summed per K
block and then across blocks; any size.
"""

import ctypes

import torch
import torch.nn as nn

from tools.compile import load_c

C_SRC = r"""
#include <stdint.h>

#define BI 32   /* rows of C per tile */
#define BJ 256  /* columns of C per tile */
#define BK 128  /* depth of one K block */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void matmul(const float* restrict A, const float* restrict B, float* restrict C,
            int64_t M, int64_t K, int64_t N)
{
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i0 = 0; i0 < M; i0 += BI) {
        for (int64_t j0 = 0; j0 < N; j0 += BJ) {
            const int64_t i1 = min64(i0 + BI, M), j1 = min64(j0 + BJ, N);
            for (int64_t i = i0; i < i1; ++i)
                for (int64_t j = j0; j < j1; ++j) C[i * N + j] = 0.0f;
            for (int64_t k0 = 0; k0 < K; k0 += BK) {
                const int64_t k1 = min64(k0 + BK, K);
                for (int64_t i = i0; i < i1; ++i) {
                    /* Sum one K block apart, then add it to C: two-level summation keeps the
                       rounding error close to torch's for large K. */
                    float acc[BJ] = {0.0f};
                    for (int64_t k = k0; k < k1; ++k) {
                        const float a = A[i * K + k];
                        const float* restrict b = B + k * N + j0;
                        for (int64_t j = 0; j < j1 - j0; ++j) acc[j] += a * b[j];
                    }
                    float* restrict c = C + i * N + j0;
                    for (int64_t j = 0; j < j1 - j0; ++j) c[j] += acc[j];
                }
            }
        }
    }
}
"""

_lib = load_c(C_SRC, name="matmul")
_lib.matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3
_lib.matmul.restype = None


class ModelNew(nn.Module):
    """C = A @ B for 2-D fp32 CPU tensors (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in (A, B)):
            raise TypeError("A and B must be float32 CPU tensors")
        if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
            raise ValueError(f"cannot multiply {tuple(A.shape)} by {tuple(B.shape)}")
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=torch.float32, device=A.device)
        _lib.matmul(A.data_ptr(), B.data_ptr(), C.data_ptr(), M, K, N)
        return C
