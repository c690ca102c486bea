"""``matmul_cuda_simt``: fp32 GEMM on the CUDA cores, pipelined, for the strict policy (no tensor cores).

``matmul_cuda_tiled`` loads a tile, waits, computes, waits again: the FFMA units idle while a tile arrives, and its
8x8 micro-tiles take twice the shared-memory wavefronts their B reads need. This kernel keeps the FFMAs busy:

- the next K step's tile is loaded from global memory into registers (float4 loads) while the current one is
  multiplied, then stored into the other of two shared-memory buffers: one barrier per K step;
- each thread's TM x TN outputs are four quadrants half a tile apart, and a warp is 4 x 8 threads, so a warp's
  float4 reads of a K slice touch 4 distinct A and 8 distinct B places: about one shared-memory wavefront each;
- TM x TN of 16 x 8 (128 accumulators, one block of 8 warps an SM: the shape of cuBLAS's own SGEMM on the H200)
  do 128 FFMAs per 6 float4 reads where 8 x 8 do 64 per 4, but in this kernel they ran slower than 8 x 8 with two
  blocks an SM (bench/RESULTS.md: 0.94x cuBLAS fp32 on 4096², against 0.67-0.82x);
- the next K slice's fragments are read from shared memory while the current slice's 64 FFMAs run;
- blocks run in groups of GROUP tile rows, column by column, so that blocks resident together share tiles in L2;
- with SERPENTINE, odd rows of the micro-tile take their columns backwards. ptxas picks the registers, and an FFMA
  whose two non-cached operands share a register bank costs the dispatch a cycle; this order lets consecutive FFMAs
  share an operand at each row's end and left 16% of the 8 x 8 loop's FFMAs with a conflict against 27%: dispatch
  stalls 0.42 -> 0.27 per issued instruction, 0.935x -> 0.96x cuBLAS fp32 on 4096² (bench/ffma_banks.py,
  bench/RESULTS.md). The one-block 8 x 16 and 16 x 8 shapes ran 3-10% slower with it: ptxas's allocation and
  schedule move with the order in ways the conflict count alone does not predict, so it is a searched parameter.
- with EARLY, the next step's tile is stored and the barrier passed before this step's last slice, so that the
  next step's first fragments are read while that slice's FFMAs run instead of right after the barrier. The 16 x 8
  micro-tile (two blocks of 4 warps an SM) gained 10-15% by it (0.82x -> 0.95x cuBLAS fp32 on 4096²); the 8 x 8 one
  lost 4-14%, its registers then allocated with more bank conflicts (bench/RESULTS.md). Searched, like the order.

Each output is one fp32 accumulator, one fused multiply-add per k, in K order.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY, MATMUL_TILES_LAUNCH_PY

# What both SIMT GEMMs share (matmul_cuda_simt, matmul_cuda_bulk): the block order, a K slice's outer product and the
# thread's stores, after the kernel's TM, TN, HM, HN, BM, BN, SERPENTINE and GROUP macros.
MICRO_TILE_CU = r"""
// This block's tile (row tm, column tn): blocks run in groups of GROUP tile rows, column by column, so that blocks
// resident together share tiles in L2.
__device__ __forceinline__ void block_tile(int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP * tiles_n;
    const int first_m = (int)(blockIdx.x / per_group) * GROUP;
    const int group_rows = min(tiles_m - first_m, GROUP);
    const int in_group = (int)(blockIdx.x % per_group);
    tm = first_m + in_group % group_rows;
    tn = in_group / group_rows;
}

// One K slice: acc += fa x fb, the fragments as float4s; under SERPENTINE odd rows take their columns backwards.
__device__ __forceinline__ void multiply_slice(float (&acc)[TM][TN], const float4 (&fa)[TM / 4],
                                               const float4 (&fb)[TN / 4])
{
    float av[TM], bv[TN];
#pragma unroll
    for (int q = 0; q < TM / 4; ++q) {
        av[4 * q] = fa[q].x;
        av[4 * q + 1] = fa[q].y;
        av[4 * q + 2] = fa[q].z;
        av[4 * q + 3] = fa[q].w;
    }
#pragma unroll
    for (int q = 0; q < TN / 4; ++q) {
        bv[4 * q] = fb[q].x;
        bv[4 * q + 1] = fb[q].y;
        bv[4 * q + 2] = fb[q].z;
        bv[4 * q + 3] = fb[q].w;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) {
            const int j = SERPENTINE && (i & 1) ? TN - 1 - jj : jj;
            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
}

// The thread's outputs into the block's tile at c (rows N floats apart): rows HM * ty + 0..HM-1 and BM / 2 below,
// columns HN * tx + 0..HN-1 and BN / 2 across, a float4 at a time.
__device__ __forceinline__ void store_tile(float* c, int N, int ty, int tx, const float (&acc)[TM][TN])
{
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float* row = c + (size_t)((i < HM ? 0 : BM / 2) + HM * ty + i % HM) * N;
#pragma unroll
        for (int q = 0; q < TN / 4; ++q) {
            const int n = (q < HN / 4 ? 0 : BN / 2) + HN * tx + 4 * (q % (HN / 4));
            *reinterpret_cast<float4*>(row + n) =
                make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
        }
    }
}
"""

MATMUL_SIMT_CU = c_params(r"""
// fp32 C = A @ B on the CUDA cores (FFMA, fp32 accumulate, no tensor cores): the strict policy's GEMM.
@SUMMARY_C@
// M, N and K are multiples of BM, BN and BK; A, B and C 16-byte aligned (the wrapper checks). Batched over
// blockIdx.y, for bmm.
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step
#param TM          // rows of C per thread (8 or 16): two runs of TM / 2, half a tile apart
#param TN          // columns of C per thread, likewise
#param MIN_BLOCKS  // blocks an SM must hold (caps the registers per thread)
#param SERPENTINE  // 1: odd rows of the micro-tile take their columns backwards (see the module's notes)
#param GROUP       // tile rows per group of the block order
#param EARLY       // 1: the next step's tile is stored, and its first slice read, before this step's last slice
#define HM (TM / 2)
#define HN (TN / 2)
#define TX (BN / TN)  // threads across a tile's columns
#define TY (BM / TM)  // threads down its rows
#define THREADS (TX * TY)
#define LA (BM * BK / 4 / THREADS)  // float4s of A's tile each thread loads per K step
#define LB (BK * BN / 4 / THREADS)  // and of B's
#define PAD 4  // A's transposing stores: rows 4 floats longer put k and k + 4 on other banks

static_assert(HM % 4 == 0 && HN % 4 == 0, "a thread's runs are whole float4s");
static_assert(TX % 8 == 0 && TY % 4 == 0, "warps of 4 x 8 threads tile the block's threads");
static_assert(THREADS <= 1024, "at most 1024 threads");
static_assert(LA >= 1 && LB >= 1 && (BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
              "tile loads divide evenly over the threads");
@MICRO_TILE@
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_simt(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[2][BK][BM + PAD];  // A's tile transposed: As[k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];

    int tm, tn;
    block_tile(M / BM, N / BN, tm, tn);

    const float* a = A + (size_t)blockIdx.y * M * K + (size_t)tm * BM * K;
    const float* b = B + (size_t)blockIdx.y * K * N + (size_t)tn * BN;
    float* c = C + (size_t)blockIdx.y * M * N + (size_t)tm * BM * N + (size_t)tn * BN;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int ty = (warp / (TX / 8)) * 4 + lane / 8;  // this thread's rows: HM * ty + 0..HM-1, then BM / 2 more
    const int tx = (warp % (TX / 8)) * 8 + lane % 8;  // its columns: HN * tx + 0..HN-1, then BN / 2 more

    float4 ra[LA], rb[LB];
    auto load = [&](int k0) {
#pragma unroll
        for (int l = 0; l < LA; ++l) {
            const int i = tid + l * THREADS, m = i / (BK / 4), kq = i % (BK / 4);
            ra[l] = __ldg(reinterpret_cast<const float4*>(a + (size_t)m * K + k0 + 4 * kq));
        }
#pragma unroll
        for (int l = 0; l < LB; ++l) {
            const int i = tid + l * THREADS, k = i / (BN / 4), nq = i % (BN / 4);
            rb[l] = __ldg(reinterpret_cast<const float4*>(b + (size_t)(k0 + k) * N + 4 * nq));
        }
    };
    auto store = [&](int s) {
#pragma unroll
        for (int l = 0; l < LA; ++l) {
            const int i = tid + l * THREADS, m = i / (BK / 4), kq = i % (BK / 4);
            As[s][4 * kq][m] = ra[l].x;
            As[s][4 * kq + 1][m] = ra[l].y;
            As[s][4 * kq + 2][m] = ra[l].z;
            As[s][4 * kq + 3][m] = ra[l].w;
        }
#pragma unroll
        for (int l = 0; l < LB; ++l) {
            const int i = tid + l * THREADS, k = i / (BN / 4), nq = i % (BN / 4);
            *reinterpret_cast<float4*>(&Bs[s][k][4 * nq]) = rb[l];
        }
    };
    // Float4 q of a K slice's fragments: the thread's first run of rows (columns), then its second.
    float4 fa[2][TM / 4], fb[2][TN / 4];  // [slice parity][q]
    auto fragments = [&](int s, int k, int p) {
#pragma unroll
        for (int q = 0; q < TM / 4; ++q) {
            const int m = (q < HM / 4 ? 0 : BM / 2) + HM * ty + 4 * (q % (HM / 4));
            fa[p][q] = *reinterpret_cast<const float4*>(&As[s][k][m]);
        }
#pragma unroll
        for (int q = 0; q < TN / 4; ++q) {
            const int n = (q < HN / 4 ? 0 : BN / 2) + HN * tx + 4 * (q % (HN / 4));
            fb[p][q] = *reinterpret_cast<const float4*>(&Bs[s][k][n]);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    load(0);
    store(0);
    __syncthreads();
    const int steps = K / BK;
    if (EARLY) fragments(0, 0, 0);
    for (int t = 0; t < steps; ++t) {
        const int s = t & 1;
        if (t + 1 < steps) load((t + 1) * BK);  // in flight while this step's FFMAs run
        if (!EARLY) fragments(s, 0, 0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const int p = k & 1;
            if (k + 1 < BK) {
                fragments(s, k + 1, p ^ 1);  // the next slice's reads overlap this slice's FFMAs
            } else if (EARLY && t + 1 < steps) {
                // The other buffer's last readers passed the previous step's barrier, and this step's last slice is
                // in registers already: the barrier can come before that slice's FFMAs.
                store(s ^ 1);
                __syncthreads();
                fragments(s ^ 1, 0, p ^ 1);
            }
            multiply_slice(acc, fa[p], fb[p]);
        }
        if (!EARLY) {
            if (t + 1 < steps) store(s ^ 1);  // the other buffer: its last readers passed the previous barrier
            __syncthreads();
        }
    }

    store_tile(c, N, ty, tx, acc);
}
""")


MATMUL_SIMT_PY = (
    r'''"""Builtin candidate `matmul_cuda_simt` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul) on
the CUDA cores, fp32 accumulation: M a multiple of @BM@, N of @BN@, K of @BK@.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_BM, _BN, _BK, _THREADS, _SMEM = @BM@, @BN@, @BK@, @THREADS@, 0  # static shared memory only
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T
_KERNEL = cupy.RawKernel(CUDA_SRC, "matmul_simt", options=("-std=c++17",))
@STREAM_PY@

'''
    + MATMUL_OPERANDS_PY
    + MATMUL_TILES_LAUNCH_PY
)


def threads(params: dict[str, Any]) -> int:
    return (params["bm"] // params["tm"]) * (params["bn"] // params["tn"])


def valid(params: dict[str, Any]) -> bool:
    """Warps of 4 x 8 threads, tile loads that divide over the threads, both buffers of both tiles within the
    48 KiB of static shared memory a block may declare, and registers for the accumulators and ~64 more a thread
    (operands, addresses) for the blocks an SM must hold."""
    bm, bn, bk = params["bm"], params["bn"], params["bk"]
    n = threads(params)
    smem = 2 * bk * (bm + 4 + bn) * 4
    tx, ty = bn // params["tn"], bm // params["tm"]
    tiles_divide = tx % 8 == 0 and ty % 4 == 0 and (bm * bk // 4) % n == 0 and (bk * bn // 4) % n == 0
    registers = n * params["min_blocks"] * (params["tm"] * params["tn"] + 64)
    return tiles_divide and smem <= 48 * 1024 and registers <= 65536


def micro_tile_values(params: dict[str, Any], summary: str) -> dict[str, Any]:
    """The placeholders both SIMT GEMM sources share: the summary, the tile and micro-tile, the order, the block
    group, and the micro-tile's code."""
    return {
        "SUMMARY_C": wrap(summary, "// "),
        "BM": params["bm"],
        "BN": params["bn"],
        "BK": params["bk"],
        "TM": params["tm"],
        "TN": params["tn"],
        "MIN_BLOCKS": params["min_blocks"],
        "SERPENTINE": c_bool(params["order"] == "serpentine"),
        "GROUP": 8,
        "MICRO_TILE": MICRO_TILE_CU,
    }


def render_matmul_simt(params: dict[str, Any], summary: str) -> str:
    cu = fill(MATMUL_SIMT_CU, **micro_tile_values(params, summary), EARLY=c_bool(params["early"]))
    return fill(
        MATMUL_SIMT_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BM=params["bm"],
        BN=params["bn"],
        BK=params["bk"],
        THREADS=threads(params),
        TRANSPOSED=transposed(params),
    )
