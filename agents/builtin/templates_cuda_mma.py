"""Tensor-core matmul template: ``mma.sync`` m16n8k8 TF32 (sm_80+), cp.async pipeline, fp32 accumulation.

``split=1`` is plain TF32: about 1e-3 relative error, allowed only under the relaxed tolerance policy (the
static checks note the TF32 use and the report says so). ``split=3`` splits every fp32 operand into a TF32
"big" part and a TF32 remainder and accumulates three products, so the result keeps fp32-level accuracy;
it still runs TF32 instructions, which the static checks cannot tell from a downgrade, so the whole template
is offered under the relaxed policy only. ``promote`` accumulates each K step in fresh fragments and adds them into
the running total with rounded CUDA-core adds, because the tensor cores' own accumulation truncates.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY, MATMUL_TILES_LAUNCH_PY

# The multi-stage cp.async main loop of the tensor-core GEMMs (this one and templates_matmul_bf16x3), written once:
# zeroed accumulators, the pipeline's first STAGES - 1 loads, then each K step's wait, barrier and next load and,
# with PROMOTE, fresh partials (ACC names what the step's mma add into). The kernel defines load_stage(stage, k0),
# MI, NI, BK, STAGES, K, and after MMA_STEP_BEGIN_CU its step's mma work, then MMA_STEP_END_CU: the partials
# added, and C stored from the mma fragments' layout (rows g and g + 8, columns 2t and 2t + 1).
MMA_STEP_BEGIN_CU = r"""    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    const int KT = K / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s * BK);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    for (int kt = 0; kt < KT; ++kt) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
        __syncthreads();  // this stage has landed for every thread, and the stage reloaded below is free
        const int next = kt + STAGES - 1;
        if (next < KT) load_stage(next % STAGES, next * BK);
        asm volatile("cp.async.commit_group;" ::: "memory");

#if PROMOTE
        // The tensor cores' fp32 accumulation truncates; over K = 4096 the bias builds up. A fresh partial per
        // BK step keeps the truncated sums short, and the running total is kept with rounded CUDA-core adds.
        float part[MI][NI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) part[i][j][q] = 0.0f;
#define ACC part
#else
#define ACC acc
#endif"""

MMA_STEP_END_CU = r"""#if PROMOTE
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] += part[i][j][q];
#endif
#undef ACC
    }

#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = row0 + wm + i * 16 + g, c = col0 + wn + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(C + (size_t)r * N + c) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(C + (size_t)(r + 8) * N + c) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
}"""


MATMUL_MMA_CU = c_params(r"""
// C = A @ B on tensor cores: mma.sync m16n8k8 TF32 with fp32 accumulation, cp.async multi-stage pipeline.
// SPLIT 1: plain TF32 (relaxed policy). SPLIT 3: each operand split into a TF32 "big" part and a TF32 "small"
// remainder, three products accumulated (small*big + big*small + big*big): fp32-level accuracy (strict policy).
@SUMMARY_C@
#param BM
#param BN
#param BK
#param WM          // warp tile rows
#param WN          // warp tile columns
#param STAGES
#param SPLIT
#param MIN_BLOCKS
#param PROMOTE  // 1: each BK step accumulates in fresh fragments, added to the total with rounded adds
#param GROUP        // block rows per L2 group (blocks sweep a group of row tiles column by column)
#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (WARPS_M * WARPS_N * 32)
#define MI (WM / 16)
#define NI (WN / 8)
#define AS_LD (BK + 4)  // padded strides keep the fragment loads free of bank conflicts
#define BS_LD (BN + 8)
#define A_STAGE (BM * AS_LD)
#define B_STAGE (BK * BS_LD)

static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "tile loads divide over threads");

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ unsigned tf32(float v)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b)
{
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_mma(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    // Batched (bmm) over blockIdx.y.
    A += (size_t)blockIdx.y * M * K;
    B += (size_t)blockIdx.y * K * N;
    C += (size_t)blockIdx.y * M * N;
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    // Grouped tile order: consecutive blocks share A row panels and B column panels in L2.
    const int tiles_m = M / BM, tiles_n = N / BN;
    const int id = blockIdx.x;
    const int per_group = GROUP * tiles_n;
    const int first_m = (id / per_group) * GROUP;
    const int group_m = min(tiles_m - first_m, GROUP);
    const int tile_m = first_m + (id % per_group) % group_m;
    const int tile_n = (id % per_group) / group_m;
    const int row0 = tile_m * BM, col0 = tile_n * BN;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const int g = lane / 4, t = lane % 4;

    auto load_stage = [&](int stage, int k0) {
        float* as = As + stage * A_STAGE;
        float* bs = Bs + stage * B_STAGE;
#pragma unroll
        for (int l = 0; l < BM * BK / 4 / THREADS; ++l) {
            const int i = tid + l * THREADS;
            const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            cp_async16(as + r * AS_LD + c, A + (size_t)(row0 + r) * K + k0 + c);
        }
#pragma unroll
        for (int l = 0; l < BK * BN / 4 / THREADS; ++l) {
            const int i = tid + l * THREADS;
            const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            cp_async16(bs + r * BS_LD + c, B + (size_t)(k0 + r) * N + col0 + c);
        }
    };

@MMA_STEP_BEGIN@
        const float* as = As + (kt % STAGES) * A_STAGE;
        const float* bs = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned a[MI][4], b[NI][2];
#if SPLIT == 3
            unsigned as_[MI][4], bs_[NI][2];
#endif
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const float* p = as + (wm + i * 16 + g) * AS_LD + kk + t;
                const float v[4] = {p[0], p[8 * AS_LD], p[4], p[8 * AS_LD + 4]};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    a[i][q] = tf32(v[q]);
#if SPLIT == 3
                    // cvt leaves the low 13 bits unspecified: clear them before taking the remainder.
                    as_[i][q] = tf32(v[q] - __uint_as_float(a[i][q] & 0xffffe000u));
#endif
                }
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float* p = bs + (kk + t) * BS_LD + wn + j * 8 + g;
                const float v[2] = {p[0], p[4 * BS_LD]};
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    b[j][q] = tf32(v[q]);
#if SPLIT == 3
                    bs_[j][q] = tf32(v[q] - __uint_as_float(b[j][q] & 0xffffe000u));
#endif
                }
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
#if SPLIT == 3
                    mma(ACC[i][j], as_[i], b[j]);
                    mma(ACC[i][j], a[i], bs_[j]);
#endif
                    mma(ACC[i][j], a[i], b[j]);
                }
        }
@MMA_STEP_END@
""")

MATMUL_MMA_PY = (
    r'''"""Builtin candidate `matmul_cuda_mma` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul):
M a multiple of @BM@, N of @BN@, K of @BK@.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_BM, _BN, _BK, _THREADS, _SMEM = @BM@, @BN@, @BK@, @THREADS@, @SMEM@
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T
_KERNEL = cupy.RawKernel(CUDA_SRC, "matmul_mma", options=("-std=c++17",))
@STREAM_PY@
_KERNEL.max_dynamic_shared_size_bytes = _SMEM


'''
    + MATMUL_OPERANDS_PY
    + MATMUL_TILES_LAUNCH_PY
)

WARP_TILES = {"64x32": (64, 32), "64x64": (64, 64), "32x64": (32, 64)}


def threads(params: dict[str, Any]) -> int:
    wm, wn = WARP_TILES[params["warp"]]
    return (params["bm"] // wm) * (params["bn"] // wn) * 32


def smem_bytes(params: dict[str, Any]) -> int:
    bm, bn, bk = params["bm"], params["bn"], params["bk"]
    return params["stages"] * (bm * (bk + 4) + bk * (bn + 8)) * 4


def valid(params: dict[str, Any]) -> bool:
    """Whole warps, at most 1024 threads, tile loads that divide over them, shared memory within an H100/H200
    block's 227 KiB, and accumulators that fit the register file (a 64x64 warp tile with promotion spills)."""
    n = threads(params)
    bm, bn, bk = params["bm"], params["bn"], params["bk"]
    wm, wn = WARP_TILES[params["warp"]]
    return (
        128 <= n <= 512
        and (bm * bk // 4) % n == 0
        and (bk * bn // 4) % n == 0
        and smem_bytes(params) <= 227 * 1024
        and not (params["promote"] and params["split"] == 3 and wm * wn > 2048)
    )


def fill_gemm(source: str, params: dict[str, Any], summary: str, **more: Any) -> str:
    """A tensor-core GEMM's CUDA source (this one's or templates_matmul_bf16x3's) filled for one point: the
    shared main loop, the tile shapes, the pipeline, promotion and the block order, and ``more``."""
    wm, wn = WARP_TILES[params["warp"]]
    return fill(
        source,
        SUMMARY_C=wrap(summary, "// "),
        MMA_STEP_BEGIN=MMA_STEP_BEGIN_CU,
        MMA_STEP_END=MMA_STEP_END_CU,
        BM=params["bm"],
        BN=params["bn"],
        BK=params["bk"],
        WM=wm,
        WN=wn,
        STAGES=params["stages"],
        PROMOTE=c_bool(params["promote"]),
        GROUP=8,
        **more,
    )


def render_matmul_mma(params: dict[str, Any], summary: str) -> str:
    cu = fill_gemm(MATMUL_MMA_CU, params, summary, SPLIT=params["split"], MIN_BLOCKS=1)
    return fill(
        MATMUL_MMA_PY,
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
