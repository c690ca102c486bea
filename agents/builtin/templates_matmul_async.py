"""``matmul_cuda_async``: fp32 GEMM on the CUDA cores with a multi-stage ``cp.async`` pipeline (strict policy).

``matmul_cuda_simt`` stages the next K step's tiles through registers, which costs registers the accumulators
need and allows one step of look-ahead. Here the tiles go from global to shared memory by ``cp.async``, STAGES - 1
steps ahead, with no registers held for them:

- A's tile stays as it is in memory (rows of BK floats, K contiguous), so it is copied in 16-byte pieces like B's;
  a thread reads four k of one of its rows with one float4 and multiplies four K slices from what it read. Rows
  four apart would share banks; every group of four rows is shifted by four floats so that the four rows a warp
  reads at once fall on different banks;
- each thread's TM x TN outputs are TM / 4 runs of 4 rows and TN / 4 runs of 4 columns, a tile's fraction apart,
  and a warp is 4 x 8 threads: its float4 reads of B cover 128 contiguous bytes (one wavefront);
- one barrier per K step: the step's copies are waited for, then the stage the previous step read is refilled;
- blocks run in groups of GROUP tile rows, column by column, so that blocks resident together share tiles in L2.

Each output is one fp32 accumulator, one fused multiply-add per k, in K order (the same sums as cuBLAS's SIMT
kernels).
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY, MATMUL_TILES_LAUNCH_PY

MATMUL_ASYNC_CU = c_params(r"""
// fp32 C = A @ B on the CUDA cores (FFMA, fp32 accumulate, no tensor cores), tiles copied by cp.async.
@SUMMARY_C@
// M, N and K are multiples of BM, BN and BK; A, B and C 16-byte aligned (the wrapper checks). Batched over
// blockIdx.y, for bmm.
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step
#param TM          // rows of C per thread: TM / 4 runs of 4, BM / (TM / 4) apart
#param TN          // columns of C per thread: TN / 4 runs of 4, BN / (TN / 4) apart
#param STAGES      // K steps in shared memory: STAGES - 1 in flight while one is multiplied
#param AV          // k of a row of A read at once (4: a float4, 2: a float2, fewer registers)
#param MIN_BLOCKS  // blocks an SM must hold (caps the registers per thread)
#param GROUP       // tile rows per group of the block order
#define RM (TM / 4)
#define RN (TN / 4)
#define TX (BN / TN)  // threads across a tile's columns
#define TY (BM / TM)  // threads down its rows
#define THREADS (TX * TY)
#define A_LD(m) ((m) * BK + ((m) / 4) * 4)  // float offset of row m of A's tile: four floats more every 4 rows
#define A_STAGE (BM * BK + BM)
#define B_STAGE (BK * BN)

static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && (AV == 2 || AV == 4), "runs and K slices are whole float4s");
static_assert(TX % 8 == 0 && TY % 4 == 0, "warps of 4 x 8 threads tile the block's threads");
static_assert(THREADS <= 1024 && STAGES >= 2, "at most 1024 threads, at least two stages");
static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "tile copies divide over the threads");

__device__ __forceinline__ void copy16(float* smem, const float* gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_async(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];  // STAGES x (A's tile, B's tile)

    const int tiles_m = M / BM, tiles_n = N / BN;
    const int per_group = GROUP * tiles_n;
    const int first_m = (int)(blockIdx.x / per_group) * GROUP;
    const int group_rows = min(tiles_m - first_m, GROUP);
    const int in_group = (int)(blockIdx.x % per_group);
    const int tm = first_m + in_group % group_rows, tn = in_group / group_rows;

    const float* a = A + (size_t)blockIdx.y * M * K + (size_t)tm * BM * K;
    const float* b = B + (size_t)blockIdx.y * K * N + (size_t)tn * BN;
    float* c = C + (size_t)blockIdx.y * M * N + (size_t)tm * BM * N + (size_t)tn * BN;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int ty = (warp / (TX / 8)) * 4 + lane / 8;  // rows r * BM / RM + 4 * ty + 0..3
    const int tx = (warp % (TX / 8)) * 8 + lane % 8;  // columns r * BN / RN + 4 * tx + 0..3

    auto copy_step = [&](int stage, int k0) {
        float* as = smem + stage * (A_STAGE + B_STAGE);
        float* bs = as + A_STAGE;
#pragma unroll
        for (int l = 0; l < BM * BK / 4 / THREADS; ++l) {
            const int i = tid + l * THREADS, m = i / (BK / 4), kq = i % (BK / 4);
            copy16(as + A_LD(m) + 4 * kq, a + (size_t)m * K + k0 + 4 * kq);
        }
#pragma unroll
        for (int l = 0; l < BK * BN / 4 / THREADS; ++l) {
            const int i = tid + l * THREADS, k = i / (BN / 4), nq = i % (BN / 4);
            copy16(bs + k * BN + 4 * nq, b + (size_t)(k0 + k) * N + 4 * nq);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int steps = K / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) copy_step(s, s * BK);
        asm volatile("cp.async.commit_group;" ::: "memory");  // one group per step, empty ones included
    }
    for (int t = 0; t < steps; ++t) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");  // step t's copies are in
        __syncthreads();  // ... for every thread, and every thread is done with step t - 1's stage
        const int next = t + STAGES - 1;
        if (next < steps) copy_step(next % STAGES, next * BK);  // refills step t - 1's stage
        asm volatile("cp.async.commit_group;" ::: "memory");

        const float* as = smem + (t % STAGES) * (A_STAGE + B_STAGE);
        const float* bs = as + A_STAGE;
#pragma unroll
        for (int k0 = 0; k0 < BK; k0 += AV) {
            float av[TM][AV];  // AV k of each of this thread's rows, one read a row
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float* p = as + A_LD((i / 4) * (BM / RM) + 4 * ty + i % 4) + k0;
                if constexpr (AV == 4) {
                    const float4 v = *reinterpret_cast<const float4*>(p);
                    av[i][0] = v.x, av[i][1] = v.y, av[i][2] = v.z, av[i][3] = v.w;
                } else {
                    const float2 v = *reinterpret_cast<const float2*>(p);
                    av[i][0] = v.x, av[i][1] = v.y;
                }
            }
#pragma unroll
            for (int kk = 0; kk < AV; ++kk) {
                float bv[TN];
#pragma unroll
                for (int q = 0; q < RN; ++q) {
                    const float4 v = *reinterpret_cast<const float4*>(bs + (k0 + kk) * BN + q * (BN / RN) + 4 * tx);
                    bv[4 * q] = v.x, bv[4 * q + 1] = v.y, bv[4 * q + 2] = v.z, bv[4 * q + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i][kk], bv[j], acc[i][j]);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");  // no copy outlives the block (the last groups are empty)

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float* row = c + (size_t)((i / 4) * (BM / RM) + 4 * ty + i % 4) * N;
#pragma unroll
        for (int q = 0; q < RN; ++q)
            *reinterpret_cast<float4*>(row + q * (BN / RN) + 4 * tx) =
                make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
    }
}
""")


MATMUL_ASYNC_PY = (
    r'''"""Builtin candidate `matmul_cuda_async` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul) on
the CUDA cores, fp32 accumulation: M a multiple of @BM@, N of @BN@, K of @BK@.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_BM, _BN, _BK, _THREADS, _SMEM = @BM@, @BN@, @BK@, @THREADS@, @SMEM@
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T
_KERNEL = cupy.RawKernel(CUDA_SRC, "matmul_async", options=("-std=c++17",))
@STREAM_PY@
_KERNEL.max_dynamic_shared_size_bytes = _SMEM


'''
    + MATMUL_OPERANDS_PY
    + MATMUL_TILES_LAUNCH_PY
)

SMEM_PER_SM = 227 * 1024  # the most shared memory an H100 / H200 block may have (and, with 1 KiB each, an SM holds)


def threads(params: dict[str, Any]) -> int:
    return (params["bm"] // params["tm"]) * (params["bn"] // params["tn"])


def smem_bytes(params: dict[str, Any]) -> int:
    bm, bn, bk = params["bm"], params["bn"], params["bk"]
    return params["stages"] * (bm * bk + bm + bk * bn) * 4


def valid(params: dict[str, Any]) -> bool:
    """Warps of 4 x 8 threads, tile copies that divide over the threads, the stages of the blocks an SM must
    hold within its shared memory, and registers for the accumulators, a float4 of A per row and ~32 more a
    thread for those blocks."""
    bm, bn, bk, tm, tn = params["bm"], params["bn"], params["bk"], params["tm"], params["tn"]
    n = threads(params)
    tx, ty = bn // tn, bm // tm
    tiles_divide = tx % 8 == 0 and ty % 4 == 0 and (bm * bk // 4) % n == 0 and (bk * bn // 4) % n == 0
    blocks = params["min_blocks"]
    registers = n * blocks * (tm * tn + params["av"] * tm + tn + 32)
    return (
        tiles_divide
        and n <= 1024
        and blocks * (smem_bytes(params) + 1024) <= SMEM_PER_SM + 1024
        and (registers <= 65536)
    )


def render_matmul_async(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        MATMUL_ASYNC_CU,
        SUMMARY_C=wrap(summary, "// "),
        BM=params["bm"],
        BN=params["bn"],
        BK=params["bk"],
        TM=params["tm"],
        TN=params["tn"],
        STAGES=params["stages"],
        AV=params["av"],
        MIN_BLOCKS=params["min_blocks"],
        GROUP=8,
    )
    return fill(
        MATMUL_ASYNC_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BM=params["bm"],
        BN=params["bn"],
        BK=params["bk"],
        THREADS=threads(params),
        SMEM=smem_bytes(params),
        TRANSPOSED=transposed(params),
    )
