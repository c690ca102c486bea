"""fp32 matmul C = A @ B on CUDA: shared-memory tiled SIMT kernel (no tensor cores, no TF32).

Each 256-thread block computes a 64×64 tile of C, walking K in steps of 16; each thread keeps a
4×4 micro-tile of C in registers. Any M, N, K: partial tiles are zero-padded in shared memory and
out-of-range outputs are not stored. Works for matmul_4096 and matmul_small.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""
#define BM 64   // rows of C per block
#define BN 64   // columns of C per block
#define BK 16   // depth of one K step
#define TM 4    // rows of C per thread
#define TN 4    // columns of C per thread
#define THREADS 256  // (BM / TM) * (BN / TN)

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    // A's tile is stored transposed (As[k][m]) so that a thread reads its TM rows as one float4.
    // The +4 padding spreads the transposing stores over the banks and keeps rows 16-byte aligned.
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);  // column group of this thread
    const int ty = tid / (BN / TN);  // row group of this thread
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Load A[row0:row0+BM, k0:k0+BK]; consecutive threads read consecutive k of one row.
#pragma unroll
        for (int l = 0; l < BM * BK / THREADS; ++l) {
            const int i = tid + l * THREADS;
            const int m = i / BK, k = i % BK;
            const int gr = row0 + m, gk = k0 + k;
            As[k][m] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.0f;
        }
        // Load B[k0:k0+BK, col0:col0+BN]; consecutive threads read consecutive columns.
#pragma unroll
        for (int l = 0; l < BK * BN / THREADS; ++l) {
            const int i = tid + l * THREADS;
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gc = col0 + n;
            Bs[k][n] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a = *reinterpret_cast<const float4*>(&As[k][ty * TM]);
            const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tx * TN]);
            const float av[TM] = {a.x, a.y, a.z, a.w};
            const float bv[TN] = {b.x, b.y, b.z, b.w};
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
            const int c = col0 + tx * TN + j;
            if (c < N) C[(size_t)r * N + c] = acc[i][j];
        }
    }
}
"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
_TILE = 64
_THREADS = 256


def _as_cuda_f32(t: torch.Tensor, name: str) -> torch.Tensor:
    if not t.is_cuda or t.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 CUDA tensor, got {t.dtype} on {t.device}")
    return t.contiguous()


class ModelNew(nn.Module):
    """C = A @ B for 2-D fp32 CUDA tensors (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = _as_cuda_f32(A, "A"), _as_cuda_f32(B, "B")
        if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
            raise ValueError(f"cannot multiply {tuple(A.shape)} by {tuple(B.shape)}")
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        if M == 0 or N == 0:
            return C
        grid = ((N + _TILE - 1) // _TILE, (M + _TILE - 1) // _TILE)
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(A.device))
        with cupy.cuda.Device(A.device.index), stream:
            kernel = _MODULE.get_function("matmul_tiled")
            kernel(
                grid,
                (_THREADS,),
                (A.data_ptr(), B.data_ptr(), C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K)),
            )
        return C
