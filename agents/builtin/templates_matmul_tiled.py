"""``matmul_cuda_tiled``: the plain shared-memory tiled fp32 SIMT GEMM (load a tile, wait, multiply), the
starting point that ``templates_matmul_simt``'s pipelined kernel improves on.

The kernel source is one plain raw string literal whose ``#ifndef`` defaults are the chosen parameters, so the
harness's NVRTC pre-check compiles exactly the kernel that runs, and the literal is valid CUDA on its own. The
candidate compiles it through CuPy's ``RawModule`` at import and launches it on torch's current stream.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY

MATMUL_CU = c_params(r"""
// fp32 C = A @ B, shared-memory tiled SIMT (no tensor cores, fp32 accumulate).
@SUMMARY_C@
// A block computes a BM x BN tile of C walking K in steps of BK; each thread keeps a TM x TN micro-tile
// in registers. Partial tiles are zero-padded in shared memory; out-of-range outputs are not stored.
// Batched over blockIdx.z (grid-stride), for bmm.
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step
#param TM           // rows of C per thread (a multiple of 4)
#param TN           // columns of C per thread (a multiple of 4)
#define THREADS ((BM / TM) * (BN / TN))

static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are read as float4");
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a whole number of warps, at most 1024 threads");
static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "tile loads divide evenly over the threads");

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
             int batch)
{
    // A's tile is stored transposed (As[k][m]) so that a thread reads its TM rows as float4s.
    // The +4 padding spreads the transposing stores over the banks and keeps rows 16-byte aligned.
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);  // column group of this thread
    const int ty = tid / (BN / TN);  // row group of this thread
    const int row0 = blockIdx.x * BM;
    const int col0 = blockIdx.y * BN;

    for (int g = blockIdx.z; g < batch; g += gridDim.z) {
        const float* a = A + (size_t)g * M * K;
        const float* b = B + (size_t)g * K * N;
        float* c = C + (size_t)g * M * N;

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

        for (int k0 = 0; k0 < K; k0 += BK) {
            // A[row0:row0+BM, k0:k0+BK]; consecutive threads read consecutive k of one row.
#pragma unroll
            for (int l = 0; l < BM * BK / THREADS; ++l) {
                const int i = tid + l * THREADS;
                const int m = i / BK, k = i % BK;
                const int gr = row0 + m, gk = k0 + k;
                As[k][m] = (gr < M && gk < K) ? a[(size_t)gr * K + gk] : 0.0f;
            }
            // B[k0:k0+BK, col0:col0+BN]; consecutive threads read consecutive columns.
#pragma unroll
            for (int l = 0; l < BK * BN / THREADS; ++l) {
                const int i = tid + l * THREADS;
                const int k = i / BN, n = i % BN;
                const int gk = k0 + k, gc = col0 + n;
                Bs[k][n] = (gk < K && gc < N) ? b[(size_t)gk * N + gc] : 0.0f;
            }
            __syncthreads();

#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float av[TM], bv[TN];
#pragma unroll
                for (int q = 0; q < TM / 4; ++q) {
                    const float4 t = *reinterpret_cast<const float4*>(&As[k][ty * TM + 4 * q]);
                    av[4 * q] = t.x;
                    av[4 * q + 1] = t.y;
                    av[4 * q + 2] = t.z;
                    av[4 * q + 3] = t.w;
                }
#pragma unroll
                for (int q = 0; q < TN / 4; ++q) {
                    const float4 t = *reinterpret_cast<const float4*>(&Bs[k][tx * TN + 4 * q]);
                    bv[4 * q] = t.x;
                    bv[4 * q + 1] = t.y;
                    bv[4 * q + 2] = t.z;
                    bv[4 * q + 3] = t.w;
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = row0 + ty * TM + i;
            if (r >= M) break;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int cc = col0 + tx * TN + j;
                if (cc < N) c[(size_t)r * N + cc] = acc[i][j];
            }
        }
    }
}
""")

MATMUL_PY = (
    r'''"""Builtin candidate `matmul_cuda_tiled` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul),
fp32 accumulation.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_BM, _BN, _THREADS = @BM@, @BN@, @THREADS@
_INT_MAX = 2**31 - 1
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T


'''
    + MATMUL_OPERANDS_PY
    + r"""
        if max(M, N, K, batch) > _INT_MAX or (N + _BN - 1) // _BN > 65535:
            raise ValueError(f"shapes too large for this kernel: {tuple(A.shape)} @ {tuple(B.shape)}")
        C = torch.empty(out_shape, device=A.device, dtype=torch.float32)
        if C.numel() == 0:
            return C
        grid = ((M + _BM - 1) // _BM, (N + _BN - 1) // _BN, min(batch, 65535))
        args = (A.data_ptr(), B.data_ptr(), C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K))
        kernel = _function("matmul_tiled")
        _run_kernel(kernel, A.device, grid, (_THREADS,), (*args, cupy.int32(batch)))
        return C
"""
)


def render_matmul(params: dict[str, Any], summary: str) -> str:
    bm, bn, tm, tn = params["bm"], params["bn"], params["tm"], params["tn"]
    cu = fill(MATMUL_CU, SUMMARY_C=wrap(summary, "// "), BM=bm, BN=bn, BK=params["bk"], TM=tm, TN=tn)
    return fill(
        MATMUL_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BM=bm,
        BN=bn,
        THREADS=(bm // tm) * (bn // tn),
        TRANSPOSED=transposed(params),
    )


__all__ = ["render_matmul"]
