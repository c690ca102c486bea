"""``matmul_cuda_wgmma``: the bf16x3 GEMM of ``templates_matmul_bf16x3`` on Hopper's warpgroup MMA (sm_90a).

The arithmetic is the same (each fp32 operand split once into a bfloat16 ``hi`` and a bfloat16 remainder ``lo``,
``hi_a * hi_b + hi_a * lo_b + lo_a * hi_b`` accumulated in fp32); the engine differs. ``mma.sync`` feeds the tensor
cores from registers, a warp at a time, and ran bf16 at 372 of the 805 TFLOP/s cuBLAS reaches on the H200
(bench/RESULTS.md). ``wgmma.mma_async`` has four warps multiply a 64 x BN tile straight from shared memory,
asynchronously, which is how cuBLAS reaches that rate. On 4096² on the H200 this GEMM ran at 706 TFLOP/s (128 x 256
blocks, 2 stages), 4.0x cuBLAS fp32 with the split, where the mma.sync kernel ran 2.4x (bench/RESULTS.md).

- the split writes A's parts in A's layout and B's as (N, K) rows (transposed through shared memory; a linear
  layer's weight is (N, K) already), so both wgmma operands are K-major and need no transpose;
- blocks of 128 rows x BN columns, two warpgroups of 64 rows; K steps of 64 bf16, i.e. 128-byte rows, which
  ``cp.async`` stores with the 128-byte swizzle the shared-memory descriptors name (16-byte chunk c of row r at
  ``r * 128 + (c ^ r % 8) * 16``, every tile 1024-byte aligned), through a pipeline of STAGES buffers;
- each K step issues 12 wgmma (three products x four k16 slices) into one set of BN / 2 accumulators a thread;
  with INFLIGHT the step's group is left running while the barrier for the next refill is passed.

It computes in bfloat16, which the static checks report (``.bf16`` in inline PTX); relaxed policy only.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_params, fill, wrap
from agents.builtin.templates_matmul_bf16x3 import (
    GROUPED_TILE_CU,
    MM_LAUNCH_PY,
    MM_PARTS_PY,
    SPLIT_BF16_CU,
    render_wrapper,
)

# The kernel's fixed shape (its #defines, the swizzle and the two warpgroups), for the wrapper's checks and launch.
BM, BK, THREADS = 128, 64, 256

MATMUL_WGMMA_CU = c_params(r"""
// fp32 C = A @ B as three bf16 products of split operands by wgmma (sm_90a), fp32 accumulation.
@SUMMARY_C@
// M, N and K are multiples of 128, BN and 64 (the wrapper checks). Batched over blockIdx.y, for bmm.
#param BN          // columns of C per block: the wgmma's N (128 rows a block, two warpgroups of 64)
#param STAGES      // shared-memory buffers in the cp.async pipeline
#param GROUP       // tile rows per group of the block order
#param INFLIGHT    // 1: a K step's wgmma group still runs while the block waits to refill the previous buffer
#define BM 128
#define BK 64       // 64 bfloat16 = 128 bytes: one row of the 128-byte swizzle
#define NACC (BN / 2)  // fp32 accumulators a thread: a warpgroup's 64 x BN tile over its 128 threads
#define A_TILE (BM * BK * 2)  // bytes
#define B_TILE (BN * BK * 2)
#define STAGE_BYTES (2 * A_TILE + 2 * B_TILE)  // hi and lo tiles of A, then of B; a multiple of 1024

static_assert(BN == 128 || BN == 256, "one wgmma covers the block's columns");
static_assert(STAGES >= 2, "a buffer loads while another is multiplied");

@SPLIT_CU@
// B (batch, K, N) fp32 rows -> its parts as (batch, N, K) rows: 64 x 64 tiles through shared memory, both sides
// read and written along rows. grid (N / 64, K / 64, batch), 256 threads.
extern "C" __global__ void __launch_bounds__(256)
split_transpose_bf16(const float* __restrict__ b, int K, int N, bf16_bits* __restrict__ hi, bf16_bits* __restrict__ lo)
{
    __shared__ float tile[64][65];  // a column of 65 floats: a warp's transposed reads spread over the banks
    const int t = threadIdx.x, quad = t % 16, row = t / 16;
    const int n0 = blockIdx.x * 64, k0 = blockIdx.y * 64;
    const size_t off = (size_t)blockIdx.z * K * N;
    b += off;
    hi += off;
    lo += off;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int k = row + 16 * i;
        const float4 v = *reinterpret_cast<const float4*>(b + (size_t)(k0 + k) * N + n0 + 4 * quad);
        tile[k][4 * quad] = v.x;
        tile[k][4 * quad + 1] = v.y;
        tile[k][4 * quad + 2] = v.z;
        tile[k][4 * quad + 3] = v.w;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = row + 16 * i;
        uint2 h, l;
        split2(tile[4 * quad][n], tile[4 * quad + 1][n], h.x, l.x);
        split2(tile[4 * quad + 2][n], tile[4 * quad + 3][n], h.y, l.y);
        const size_t at = (size_t)(n0 + n) * K + k0 + 4 * quad;
        *reinterpret_cast<uint2*>(hi + at) = h;
        *reinterpret_cast<uint2*>(lo + at) = l;
    }
}

__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned smem, const bf16_bits* gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}

// A K-major operand tile in shared memory with the 128-byte swizzle: start address, leading byte offset (unused
// by this layout: 1), 1024 bytes between groups of eight rows, base offset 0 (tiles are 1024-byte aligned),
// layout 1 = SWIZZLE_128B. Fields hold byte counts >> 4.
__device__ __forceinline__ unsigned long long smem_descriptor(unsigned address)
{
    return (unsigned long long)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
        | (1ull << 62);
}

@WGMMA_CU@

// Each thread copies 16-byte chunk tid % 8 of rows tid / 8 + 32 j; rows 32 apart share their swizzle (r % 8).
__device__ __forceinline__ void load_stage(unsigned stage, const bf16_bits* a_hi, const bf16_bits* a_lo,
                                           const bf16_bits* b_hi, const bf16_bits* b_lo, size_t k0, size_t row_step,
                                           unsigned swizzled)
{
#pragma unroll
    for (int j = 0; j < BM / 32; ++j) {
        cp_async16(stage + swizzled + j * 4096, a_hi + k0 + j * row_step);
        cp_async16(stage + A_TILE + swizzled + j * 4096, a_lo + k0 + j * row_step);
    }
#pragma unroll
    for (int j = 0; j < BN / 32; ++j) {
        cp_async16(stage + 2 * A_TILE + swizzled + j * 4096, b_hi + k0 + j * row_step);
        cp_async16(stage + 2 * A_TILE + B_TILE + swizzled + j * 4096, b_lo + k0 + j * row_step);
    }
}

// A's parts (batch, M, K) rows, B's parts (batch, N, K) rows, C (batch, M, N).
extern "C" __global__ void __launch_bounds__(256, 1)
matmul_bf16x3_wgmma(const bf16_bits* __restrict__ Ah, const bf16_bits* __restrict__ Al,
                    const bf16_bits* __restrict__ Bh, const bf16_bits* __restrict__ Bl, float* __restrict__ C, int M,
                    int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    const unsigned smem = (smem_address(smem_raw) + 1023) & ~1023u;  // the swizzle repeats every 1024 bytes

@GROUPED_TILE@
    const int tid = threadIdx.x, warpgroup = tid / 128;
    const int load_row = tid / 8, chunk = tid % 8;
    const unsigned swizzled = load_row * 128 + ((chunk ^ (load_row % 8)) << 4);
    const size_t row_step = 32 * (size_t)K;
    const size_t a_at = (size_t)blockIdx.y * M * K + (size_t)(row0 + load_row) * K + chunk * 8;
    const size_t b_at = (size_t)blockIdx.y * N * K + (size_t)(col0 + load_row) * K + chunk * 8;
    Ah += a_at;
    Al += a_at;
    Bh += b_at;
    Bl += b_at;

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    const int KT = K / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(smem + s * STAGE_BYTES, Ah, Al, Bh, Bl, (size_t)s * BK, row_step, swizzled);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    const unsigned a_rows = warpgroup * 64 * 128;  // this warpgroup's 64 rows of A's tiles
    for (int kt = 0; kt < KT; ++kt) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
        // cp.async wrote through the generic proxy; wgmma reads through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();  // this stage has landed for every thread (and, without INFLIGHT, the last one is free)
        const int next = kt + STAGES - 1;
#if !INFLIGHT
        if (next < KT) load_stage(smem + next % STAGES * STAGE_BYTES, Ah, Al, Bh, Bl, next * BK, row_step, swizzled);
        asm volatile("cp.async.commit_group;" ::: "memory");
#endif
        const unsigned stage = smem + (kt % STAGES) * STAGE_BYTES;
        const unsigned long long a_hi = smem_descriptor(stage + a_rows);
        const unsigned long long a_lo = smem_descriptor(stage + A_TILE + a_rows);
        const unsigned long long b_hi = smem_descriptor(stage + 2 * A_TILE);
        const unsigned long long b_lo = smem_descriptor(stage + 2 * A_TILE + B_TILE);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned long long step = 2 * kk;  // 16 bf16 = 32 bytes further along the (swizzled) rows
            wgmma_bf16(acc, a_hi + step, b_hi + step);
            wgmma_bf16(acc, a_hi + step, b_lo + step);
            wgmma_bf16(acc, a_lo + step, b_hi + step);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#if INFLIGHT
        // The previous step's group is done for this thread, then for all: its buffer is the one refilled.
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        __syncthreads();
        if (next < KT) load_stage(smem + next % STAGES * STAGE_BYTES, Ah, Al, Bh, Bl, next * BK, row_step, swizzled);
        asm volatile("cp.async.commit_group;" ::: "memory");
#else
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    accumulators_ready(acc);

    // A warpgroup's accumulators: warp w, lane l hold, for q < BN / 8, rows 16 w + l / 4 (acc[4q], acc[4q + 1]) and
    // 8 further (acc[4q + 2], acc[4q + 3]), columns 8 q + 2 (l % 4) and the next.
    const int warp = tid / 32 % 4, lane = tid % 32;
    const int r = row0 + warpgroup * 64 + warp * 16 + lane / 4;
    float* c = C + (size_t)blockIdx.y * M * N + (size_t)r * N + col0 + 2 * (lane % 4);
#pragma unroll
    for (int q = 0; q < BN / 8; ++q) {
        *reinterpret_cast<float2*>(c + 8 * q) = make_float2(acc[4 * q], acc[4 * q + 1]);
        *reinterpret_cast<float2*>(c + (size_t)8 * N + 8 * q) = make_float2(acc[4 * q + 2], acc[4 * q + 3]);
    }
}
""")


def wgmma_cu(n: int) -> str:
    """``wgmma_bf16(d, a, b)``: d (n / 2 floats a thread) += A (64 x 16) B (16 x n), both K-major in shared memory,
    and ``accumulators_ready(d)``, which ties every accumulator to the point after the last wait (an asm operand
    list must name each of the n / 2 registers)."""
    regs = n // 2
    # Sixteen registers a line of the instruction, eight a line of the operand list.
    operands = ', "\n'.join('        "' + ", ".join(f"%{i}" for i in range(r, r + 16)) for r in range(0, regs, 16))
    outputs = ",\n".join("          " + ", ".join(f'"+f"(d[{i}])' for i in range(r, r + 8)) for r in range(0, regs, 8))
    return (
        f"__device__ __forceinline__ void wgmma_bf16(float (&d)[{regs}], unsigned long long a, unsigned long long b)\n"
        "{\n"
        "    asm volatile(\n"
        '        "{ .reg .pred accumulate; setp.ne.b32 accumulate, %' + str(regs + 2) + ', 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{"\n'
        f'{operands}"\n'
        f'        "}}, %{regs}, %{regs + 1}, accumulate, 1, 1, 0, 0; }}"\n'
        f"        :\n{outputs}\n"
        '        : "l"(a), "l"(b), "r"(1));  // scale-d is a predicate: D = A B + D\n'
        "}\n\n"
        "// No code: the compiler may not move accumulator reads above the wait that makes them final.\n"
        f"__device__ __forceinline__ void accumulators_ready(float (&d)[{regs}])\n"
        "{\n"
        "#pragma unroll\n"
        f'    for (int i = 0; i < {regs}; ++i) asm volatile("" : "+f"(d[i])::"memory");\n'
        "}"
    )


# The GEMM's module-level Python: its CUDA source, three kernels and ``_mm_bf16x3`` with the same contract as
# templates_matmul_bf16x3's, so a matmul wrapper and a linear epilogue call either alike.
MM_WGMMA_PY = (
    r'''GEMM_SRC = r"""@GEMM_SRC@"""

_GEMM_BM, _GEMM_BN, _GEMM_BK, _GEMM_THREADS, _GEMM_SMEM = @BM@, @BN@, @BK@, @THREADS@, @SMEM@
_B_ROWS_OF_K = @B_COL@  # B comes as (N, K) rows (a linear layer's weight): split in place, not transposed
_OPTIONS = ("-std=c++17", "-arch=sm_90a")  # wgmma is Hopper's, in its arch-specific target only
_SPLIT = cupy.RawKernel(GEMM_SRC, "split_bf16", options=_OPTIONS)
_SPLIT_T = cupy.RawKernel(GEMM_SRC, "split_transpose_bf16", options=_OPTIONS)
_GEMM = cupy.RawKernel(GEMM_SRC, "matmul_bf16x3_wgmma", options=_OPTIONS)
_GEMM.max_dynamic_shared_size_bytes = _GEMM_SMEM

'''
    + MM_PARTS_PY
    + r"""    if K:  # K = 0 leaves nothing to split; the GEMM then writes zeros
        nb4 = nb // 4 if _B_ROWS_OF_K else 0  # else the transposing kernel splits B
        n4 = na // 4 + nb4
        split_args = (A.data_ptr(), cupy.int64(na // 4), B.data_ptr(), cupy.int64(nb4), a_hi, a_lo, b_hi, b_lo)
        _run_kernel(_SPLIT, A.device, (min(-(-n4 // 256), 32 * _sm_count(A.device)),), (256,), split_args)
        if not _B_ROWS_OF_K:
            args = (B.data_ptr(), cupy.int32(K), cupy.int32(N), b_hi, b_lo)
            _run_kernel(_SPLIT_T, A.device, (N // 64, K // 64, batch), (256,), args)
"""
    + MM_LAUNCH_PY
)


def smem_bytes(params: dict[str, Any]) -> int:
    """Dynamic shared memory of one block: hi and lo tiles of A (128 x 64) and B (BN x 64) for every stage, and
    1 KiB to align the first tile to the swizzle's 1024 bytes."""
    return params["stages"] * 2 * (BM + params["bn"]) * BK * 2 + 1024


def valid(params: dict[str, Any]) -> bool:
    """The stages within a block's 227 KiB of shared memory (128 x 256 blocks hold two, 128 x 128 three)."""
    return smem_bytes(params) <= 227 * 1024


def mm_module_py(params: dict[str, Any], summary: str, b_col: bool = False) -> str:
    """The GEMM's module-level Python (``MM_WGMMA_PY``) for one point; ``b_col``: B given as (N, K) rows."""
    cu = fill(
        MATMUL_WGMMA_CU,
        SUMMARY_C=wrap(summary, "// "),
        SPLIT_CU=SPLIT_BF16_CU,
        GROUPED_TILE=GROUPED_TILE_CU,
        WGMMA_CU=wgmma_cu(params["bn"]),
        BN=params["bn"],
        STAGES=params["stages"],
        GROUP=params["group"],
        INFLIGHT=int(params["inflight"]),
    )
    return fill(
        MM_WGMMA_PY,
        GEMM_SRC=cu,
        BM=BM,
        BN=params["bn"],
        BK=BK,
        THREADS=THREADS,
        SMEM=smem_bytes(params),
        B_COL=repr(b_col),
        B_SHAPE="(N, K) rows" if b_col else "(batch, K, N)",
        PARTS_LAYOUT="B's transposed to (batch, N, K) rows unless it comes so",
    )


def render_matmul_wgmma(params: dict[str, Any], summary: str) -> str:
    return render_wrapper("matmul_cuda_wgmma", params, summary, mm_module_py(params, summary), BM, BK)
