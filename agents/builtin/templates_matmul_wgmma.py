"""``matmul_cuda_wgmma``: the bf16x3 GEMM of ``templates_matmul_bf16x3`` on Hopper's warpgroup MMA (sm_90a).

The arithmetic is the same (each fp32 operand split once into a bfloat16 ``hi`` and a bfloat16 remainder ``lo``,
``hi_a * hi_b + hi_a * lo_b + lo_a * hi_b`` accumulated in fp32); the engine differs. ``mma.sync`` feeds the tensor
cores from registers, a warp at a time, and ran bf16 at 372 of the 805 TFLOP/s cuBLAS reaches on the H200
(bench/RESULTS.md). ``wgmma.mma_async`` has four warps multiply a 64 x BN tile straight from shared memory,
asynchronously, which is how cuBLAS reaches that rate. On 4096² on the H200 this GEMM ran at 706 TFLOP/s (128 x 256
blocks, 2 stages), 4.0x cuBLAS fp32 with the split, where the mma.sync kernel ran 2.4x (bench/RESULTS.md).

- the split writes A's parts in A's layout and B's as (N, K) rows (transposed through shared memory; a linear
  layer's weight is (N, K) already), so both wgmma operands are K-major and need no transpose; with FUSED the GEMM
  splits its own tiles instead: no pass over the operands, whose parts took 65 of 686 µs on 4096² and ~140 of
  ~500 µs on the suite's bmm (bench/RESULTS.md). A thread loads its share of the next K step's fp32 tiles into
  registers while the tensor cores multiply this one, then splits it into the free buffer (B's (K, N) rows
  transposed on the way: four columns x eight k a thread);
- blocks of 128 rows x BN columns, two warpgroups of 64 rows; K steps of 64 bf16, i.e. 128-byte rows, which
  ``cp.async`` (or the fused split) stores with the 128-byte swizzle the shared-memory descriptors name (16-byte
  chunk c of row r at ``r * 128 + (c ^ r % 8) * 16``, every tile 1024-byte aligned), through STAGES buffers;
- each K step issues 12 wgmma (three products x four k16 slices) into one set of BN / 2 accumulators a thread;
  with INFLIGHT the step's group is left running while the barrier for the next refill is passed;
- the store passes each value of C through ``tail_apply``: empty here, a linear epilogue's pointwise tail when
  ``templates_elementwise_gemm_tail`` builds the GEMM with one (``GemmTail``).

It computes in bfloat16, which the static checks report (``.bf16`` in inline PTX); relaxed policy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_matmul_bf16x3 import (
    GROUPED_TILE_CU,
    MM_CHECKS_PY,
    MM_LAUNCH_PY,
    MM_PARTS_PY,
    SPLIT_BF16_CU,
    SPLIT_FN_CU,
    render_wrapper,
)

# The kernel's fixed shape (its #defines, the swizzle and the two warpgroups), for the wrapper's checks and launch.
BM, BK, THREADS = 128, 64, 256

MATMUL_WGMMA_CU = c_params(r"""
// fp32 C = A @ B as three bf16 products of split operands by wgmma (sm_90a), fp32 accumulation.
@SUMMARY_C@
// M, N and K are multiples of 128, BN and 64 (the wrapper checks). Batched over blockIdx.y, for bmm.
#param BN          // columns of C per block: the wgmma's N (128 rows a block, two warpgroups of 64)
#param STAGES      // shared-memory buffers in the pipeline
#param GROUP       // tile rows per group of the block order
#define BM 128
#define BK 64       // 64 bfloat16 = 128 bytes: one row of the 128-byte swizzle
#define NACC (BN / 2)  // fp32 accumulators a thread: a warpgroup's 64 x BN tile over its 128 threads
#define A_TILE (BM * BK * 2)  // bytes
#define B_TILE (BN * BK * 2)
#define STAGE_BYTES (2 * A_TILE + 2 * B_TILE)  // hi and lo tiles of A, then of B; a multiple of 1024

static_assert(BN == 128 || BN == 256, "one wgmma covers the block's columns");
static_assert(STAGES >= 2, "a buffer loads while another is multiplied");

@SPLIT_CU@
__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A K-major operand tile in shared memory with the 128-byte swizzle (16-byte chunk c of row r at
// r * 128 + (c ^ r % 8) * 16): start address, leading byte offset (unused by this layout: 1), 1024 bytes between
// groups of eight rows, base offset 0 (tiles are 1024-byte aligned), layout 1 = SWIZZLE_128B. Fields hold byte
// counts >> 4.
__device__ __forceinline__ unsigned long long smem_descriptor(unsigned address)
{
    return (unsigned long long)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
        | (1ull << 62);
}

@WGMMA_CU@

// One K step of a warpgroup, committed as one group: its 64 rows of the stage's A tiles (from a_rows) times the B
// tiles, 12 wgmma (three products x four k16 slices) into the same accumulators.
__device__ __forceinline__ void multiply_step(float (&acc)[NACC], unsigned stage, unsigned a_rows)
{
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
}

@TAIL_CU@

// A warpgroup's finished accumulators into C (c: its first row, the block's first column col0), each value through
// the tail first. Warp w, lane l hold, for q < BN / 8, rows 16 w + l / 4 (acc[4q], acc[4q + 1]) and 8 further
// (acc[4q + 2], acc[4q + 3]), columns 8 q + 2 (l % 4) and the next.
__device__ __forceinline__ void store_tile(const float (&acc)[NACC], float* c, int N, int col0, int tid,
                                           const Tail& tail)
{
    const int warp = tid / 32 % 4, lane = tid % 32;
    c += (size_t)(warp * 16 + lane / 4) * N + 2 * (lane % 4);
#pragma unroll
    for (int q = 0; q < BN / 8; ++q) {
        float x0 = acc[4 * q], x1 = acc[4 * q + 1], y0 = acc[4 * q + 2], y1 = acc[4 * q + 3];
        tail_apply(tail, x0, x1, y0, y1, col0 + 8 * q + 2 * (lane % 4));
        *reinterpret_cast<float2*>(c + 8 * q) = make_float2(x0, x1);
        *reinterpret_cast<float2*>(c + (size_t)8 * N + 8 * q) = make_float2(y0, y1);
    }
}
@GEMM_CU@""")

# The split as a pass of its own: A's parts in A's layout, B's as (N, K) rows, then the GEMM streams both through a
# cp.async pipeline.
PASS_SPLIT_CU = r"""
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
"""

PASS_GEMM_CU = c_params(r"""
#param INFLIGHT    // 1: a K step's wgmma group still runs while the block waits to refill the previous buffer

__device__ __forceinline__ void cp_async16(unsigned smem, const bf16_bits* gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}

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
                    int N, int K@TAIL_PARAMS@)
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
        multiply_step(acc, smem + (kt % STAGES) * STAGE_BYTES, a_rows);
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
    const Tail tail{@TAIL_INIT@};
    store_tile(acc, C + (size_t)blockIdx.y * M * N + (size_t)(row0 + warpgroup * 64) * N + col0, N, col0, tid, tail);
}
""")

# The split inside the GEMM: no pass over the operands before it. A thread loads its share of the next K step's fp32
# A and B into registers while the tensor cores multiply the current step, then splits it into the free buffer.
FUSED_GEMM_CU = c_params(r"""
#param B_COL       // 1: B is given as (N, K) rows, read like A (a linear layer's weight); 0: (K, N) rows
#define A_CHUNKS (BM * 8 / 256)  // a thread's 8-float pieces of a K step of A: 16 bytes of each part
#if B_COL
#define B_LOADS (BN * 8 / 256 * 2)  // a thread's float4 loads of a K step of B
#else
#define B_LOADS (BN / 128 * 8)
#endif

// One K step's fp32 operands a thread carries from global to shared memory.
struct Staged {
    float4 a[2 * A_CHUNKS];
    float4 b[B_LOADS];
};

__device__ __forceinline__ float4 load4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Eight consecutive k of row r of an operand tile, split, into 16-byte chunk c of that row of its hi and lo tiles.
__device__ __forceinline__ void split_chunk(unsigned hi_tile, unsigned lo_tile, int r, int c, float x0, float x1,
                                            float x2, float x3, float x4, float x5, float x6, float x7)
{
    unsigned h0, h1, h2, h3, l0, l1, l2, l3;
    split2(x0, x1, h0, l0);
    split2(x2, x3, h1, l1);
    split2(x4, x5, h2, l2);
    split2(x6, x7, h3, l3);
    const unsigned at = r * 128 + ((c ^ (r % 8)) << 4);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(hi_tile + at), "r"(h0), "r"(h1), "r"(h2), "r"(h3)
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(lo_tile + at), "r"(l0), "r"(l1), "r"(l2), "r"(l3)
                 : "memory");
}

// A unit of load_rows, split into its hi and lo tiles.
__device__ __forceinline__ void split_rows(unsigned hi_tile, unsigned lo_tile, const float4* v, int u)
{
    split_chunk(hi_tile, lo_tile, u / 8, u % 8, v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w);
}

// Rows of K (A's; B's with B_COL): unit u = t + 256 j of thread t is chunk u % 8 (k 8 c .. 8 c + 7) of row u / 8,
// so a warp covers four whole rows. B's (K, N) rows otherwise: unit u is the same 8 k of columns 4 (u / 8) .. + 3,
// a float4 from each of 8 rows, stored as four chunks of B's (N, K) tile; a warp's stores then fill four rows of
// that tile, 128 bytes each, as A's do.
__device__ __forceinline__ void load_rows(float4* v, const float* rows, int K, int k0, int u)
{
    const float* p = rows + (size_t)(u / 8) * K + k0 + (u % 8) * 8;
    v[0] = load4(p);
    v[1] = load4(p + 4);
}

__device__ __forceinline__ void load_step(Staged& s, const float* A, const float* B, int K, int N, int k0, int tid)
{
#pragma unroll
    for (int j = 0; j < A_CHUNKS; ++j) load_rows(s.a + 2 * j, A, K, k0, tid + 256 * j);
#if B_COL
#pragma unroll
    for (int j = 0; j < B_LOADS / 2; ++j) load_rows(s.b + 2 * j, B, K, k0, tid + 256 * j);
#else
#pragma unroll
    for (int j = 0; j < B_LOADS / 8; ++j) {
        const int u = tid + 256 * j;
        const float* p = B + (size_t)(k0 + (u % 8) * 8) * N + (u / 8) * 4;
#pragma unroll
        for (int i = 0; i < 8; ++i) s.b[8 * j + i] = load4(p + (size_t)i * N);
    }
#endif
}

__device__ __forceinline__ void store_step(const Staged& s, unsigned stage, int tid)
{
#pragma unroll
    for (int j = 0; j < A_CHUNKS; ++j) split_rows(stage, stage + A_TILE, s.a + 2 * j, tid + 256 * j);
    const unsigned b_hi = stage + 2 * A_TILE, b_lo = b_hi + B_TILE;
#if B_COL
#pragma unroll
    for (int j = 0; j < B_LOADS / 2; ++j) split_rows(b_hi, b_lo, s.b + 2 * j, tid + 256 * j);
#else
#pragma unroll
    for (int j = 0; j < B_LOADS / 8; ++j) {
        const int u = tid + 256 * j, n = (u / 8) * 4, c = u % 8;
        const float4* v = s.b + 8 * j;
        split_chunk(b_hi, b_lo, n, c, v[0].x, v[1].x, v[2].x, v[3].x, v[4].x, v[5].x, v[6].x, v[7].x);
        split_chunk(b_hi, b_lo, n + 1, c, v[0].y, v[1].y, v[2].y, v[3].y, v[4].y, v[5].y, v[6].y, v[7].y);
        split_chunk(b_hi, b_lo, n + 2, c, v[0].z, v[1].z, v[2].z, v[3].z, v[4].z, v[5].z, v[6].z, v[7].z);
        split_chunk(b_hi, b_lo, n + 3, c, v[0].w, v[1].w, v[2].w, v[3].w, v[4].w, v[5].w, v[6].w, v[7].w);
    }
#endif
}

// A (batch, M, K) rows; B (batch, K, N) rows, or (N, K) rows with B_COL; C (batch, M, N).
extern "C" __global__ void __launch_bounds__(256, 1)
matmul_bf16x3_wgmma_fused(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                          int N, int K@TAIL_PARAMS@)
{
    extern __shared__ unsigned char smem_raw[];
    const unsigned smem = (smem_address(smem_raw) + 1023) & ~1023u;  // the swizzle repeats every 1024 bytes

@GROUPED_TILE@
    const int tid = threadIdx.x, warpgroup = tid / 128;
    A += (size_t)blockIdx.y * M * K + (size_t)row0 * K;
#if B_COL
    B += (size_t)blockIdx.y * N * K + (size_t)col0 * K;
#else
    B += (size_t)blockIdx.y * K * N + col0;
#endif

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    const int KT = K / BK;
    Staged next;
    if (KT > 0) {
        load_step(next, A, B, K, N, 0, tid);
        store_step(next, smem, tid);
    }
    if (KT > 1) load_step(next, A, B, K, N, BK, tid);
    // The parts were written through the generic proxy; wgmma reads through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    const unsigned a_rows = warpgroup * 64 * 128;  // this warpgroup's 64 rows of A's tiles
    for (int kt = 0; kt < KT; ++kt) {
        multiply_step(acc, smem + (kt % STAGES) * STAGE_BYTES, a_rows);
        if (kt + 1 < KT) {
            // Step kt + 1's buffer was last read by step kt + 1 - STAGES: done for this warpgroup, then for both.
            asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(STAGES - 1) : "memory");
            __syncthreads();
            store_step(next, smem + (kt + 1) % STAGES * STAGE_BYTES, tid);
            if (kt + 2 < KT) load_step(next, A, B, K, N, (kt + 2) * BK, tid);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    accumulators_ready(acc);
    const Tail tail{@TAIL_INIT@};
    store_tile(acc, C + (size_t)blockIdx.y * M * N + (size_t)(row0 + warpgroup * 64) * N + col0, N, col0, tid, tail);
}
""")


@dataclass(frozen=True)
class GemmTail:
    """A pointwise tail the GEMM applies to each value of C before storing it (``templates_elementwise_gemm_tail``
    builds one from a problem's expression)."""

    cu: str  # CUDA defining ``struct Tail`` and ``tail_apply(tail, x0, x1, y0, y1, col)``
    params: str  # the kernels' extra parameters, each after a comma: ", const float* w0"
    init: str  # the ``Tail``'s initialiser from those parameters: "w0"
    operands: int  # how many pointers ``_mm_bf16x3`` passes on to them


NO_TAIL = GemmTail(
    cu="""// No pointwise tail: C is stored as computed.
struct Tail {};
__device__ __forceinline__ void tail_apply(const Tail&, float&, float&, float&, float&, int) {}""",
    params="",
    init="",
    operands=0,
)


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


# The GEMM's module-level Python: its CUDA source, its kernels and ``_mm_bf16x3`` with the same contract as
# templates_matmul_bf16x3's, so a matmul wrapper and a linear epilogue call either alike. With the split as a pass,
# three kernels; with it fused, the GEMM alone.
_GEMM_HEAD_PY = r'''GEMM_SRC = r"""@GEMM_SRC@"""

_GEMM_BM, _GEMM_BN, _GEMM_BK, _GEMM_THREADS, _GEMM_SMEM = @BM@, @BN@, @BK@, @THREADS@, @SMEM@
_TAIL_OPERANDS = @TAIL_OPERANDS@  # pointers of the pointwise tail's operands the GEMM takes (0: C stored as computed)
_OPTIONS = ("-std=c++17", "-arch=sm_90a")  # wgmma is Hopper's, in its arch-specific target only
'''
MM_WGMMA_PY = (
    _GEMM_HEAD_PY
    + r"""_B_ROWS_OF_K = @B_COL@  # B comes as (N, K) rows (a linear layer's weight): split in place, not transposed
_SPLIT = cupy.RawKernel(GEMM_SRC, "split_bf16", options=_OPTIONS)
_SPLIT_T = cupy.RawKernel(GEMM_SRC, "split_transpose_bf16", options=_OPTIONS)
_GEMM = cupy.RawKernel(GEMM_SRC, "matmul_bf16x3_wgmma", options=_OPTIONS)
_GEMM.max_dynamic_shared_size_bytes = _GEMM_SMEM

"""
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
MM_WGMMA_FUSED_PY = (
    _GEMM_HEAD_PY
    + r"""_GEMM = cupy.RawKernel(GEMM_SRC, "matmul_bf16x3_wgmma_fused", options=_OPTIONS)
_GEMM.max_dynamic_shared_size_bytes = _GEMM_SMEM

"""
    + MM_CHECKS_PY
    + r"""    grid = ((M // _GEMM_BM) * (N // _GEMM_BN), batch)
    args = (A.data_ptr(), B.data_ptr(), C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K), *tail)
    _run_kernel(_GEMM, A.device, grid, (_GEMM_THREADS,), args, shared_mem=_GEMM_SMEM)
"""
)


def smem_bytes(params: dict[str, Any]) -> int:
    """Dynamic shared memory of one block: hi and lo tiles of A (128 x 64) and B (BN x 64) for every stage, and
    1 KiB to align the first tile to the swizzle's 1024 bytes."""
    return params["stages"] * 2 * (BM + params["bn"]) * BK * 2 + 1024


def valid(params: dict[str, Any]) -> bool:
    """The stages within a block's 227 KiB of shared memory (128 x 256 blocks hold two, 128 x 128 three)."""
    return smem_bytes(params) <= 227 * 1024


def mm_module_py(params: dict[str, Any], summary: str, b_col: bool = False, tail: GemmTail = NO_TAIL) -> str:
    """The GEMM's module-level Python (``MM_WGMMA_PY``, or ``MM_WGMMA_FUSED_PY``) for one point; ``b_col``: B
    given as (N, K) rows; ``tail``: what the GEMM applies to C before storing it."""
    fused = params["fused"]
    kernel = {"GROUPED_TILE": GROUPED_TILE_CU, "TAIL_PARAMS": tail.params, "TAIL_INIT": tail.init}
    if fused:
        gemm = fill(FUSED_GEMM_CU, B_COL=c_bool(b_col), **kernel)
    else:
        gemm = PASS_SPLIT_CU + fill(PASS_GEMM_CU, INFLIGHT=c_bool(params["inflight"]), **kernel)
    cu = fill(
        MATMUL_WGMMA_CU,
        SUMMARY_C=wrap(summary, "// "),
        SPLIT_CU=SPLIT_FN_CU if fused else SPLIT_BF16_CU,
        WGMMA_CU=wgmma_cu(params["bn"]),
        TAIL_CU=tail.cu,
        BN=params["bn"],
        STAGES=params["stages"],
        GROUP=params["group"],
        GEMM_CU=gemm,
    )
    return fill(
        MM_WGMMA_FUSED_PY if fused else MM_WGMMA_PY,
        GEMM_SRC=cu,
        BM=BM,
        BN=params["bn"],
        BK=BK,
        THREADS=THREADS,
        SMEM=smem_bytes(params),
        B_COL=repr(b_col),
        TAIL_OPERANDS=tail.operands,
        B_SHAPE="(N, K) rows" if b_col else "(batch, K, N)",
        PARTS_LAYOUT="B's transposed to (batch, N, K) rows unless it comes so",
    )


def render_matmul_wgmma(params: dict[str, Any], summary: str) -> str:
    return render_wrapper("matmul_cuda_wgmma", params, summary, mm_module_py(params, summary), BM, BK)
