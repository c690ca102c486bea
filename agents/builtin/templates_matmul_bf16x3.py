"""``matmul_cuda_bf16x3``: an fp32 GEMM from three bfloat16 tensor-core products, for the relaxed policy.

Plain TF32 keeps 11 bits of each operand, and on 4096-long dot products of randn data its error fails atol = rtol
= 1e-2 where outputs are near zero (bench/RESULTS.md). This kernel keeps 16 bits of each: every fp32 operand is
split into a bfloat16 ``hi`` (8 significant bits, rounded to nearest) and a bfloat16 ``lo`` holding the rounded
remainder, and ``a * b`` becomes ``lo_a * hi_b + hi_a * lo_b + hi_a * hi_b`` (the ``lo * lo`` term and the
remainder's own rounding are below 2^-16 of the product), accumulated in fp32. The products of 8-bit significands
are exact, so the error is a few units of 2^-17 of each product: on 4096² randn products it used a fifth of what
atol = rtol = 1e-2 allows (a ninth with PROMOTE), where cuBLAS's TF32 missed it sevenfold. Three bf16 products per
multiply-add on tensor cores that run bf16 at ~2x the TF32 rate: measured 2.3-2.4x cuBLAS fp32 on 4096² on the H200,
where 3xTF32 (``matmul_cuda_mma``) ran 1.0x (bench/RESULTS.md).

- a first kernel writes the hi and lo parts of A and B (bfloat16, same layouts) once, in one pass;
- the GEMM streams hi and lo tiles of both through a ``cp.async`` pipeline of STAGES buffers and reads mma
  fragments with ``ldmatrix`` (B's row-major tiles with ``.trans``); rows are padded by 16 bytes so that the eight
  rows one ``ldmatrix`` reads sit in different banks;
- ``mma.sync.m16n8k16`` bf16 with fp32 accumulators; with PROMOTE each K step sums into fresh accumulators that
  are added to the running total with rounded CUDA-core adds (the tensor cores' accumulation truncates);
- blocks run in groups of GROUP tile rows, column by column, so that blocks resident together share tiles in L2;
- with B_COL, B comes as its (N, K) transpose (a linear layer's weight, read in place) and its tiles are read like
  A's; ``epilogue_cuda_bf16x3`` builds it so.

It still computes in bfloat16, which the static checks report (and the strict policy rejects: its 1e-4 tolerance
asks for fp32's own rounding).
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY
from agents.builtin.templates_cuda_mma import WARP_TILES, fill_gemm, threads

# The split of fp32 operands into bfloat16 hi and lo parts (also done inside templates_matmul_wgmma's fused GEMM),
# and the one-pass kernel that writes them for A and B in their own layouts: the same in this GEMM and in
# templates_matmul_wgmma's.
SPLIT_FN_CU = r"""typedef unsigned short bf16_bits;  // a bfloat16's bits: kernels only move them and hand them to mma

// Two floats rounded to nearest bfloat16, packed: the first in the low half (lower address), as arrays hold them.
__device__ __forceinline__ unsigned bf16x2(float first, float second)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}

// x's remainder past its bfloat16 part h (none past an infinity, which would make it NaN).
__device__ __forceinline__ float remainder_of(float x, float h) { return isinf(h) ? 0.0f : x - h; }

__device__ __forceinline__ void split2(float x0, float x1, unsigned& hi, unsigned& lo)
{
    hi = bf16x2(x0, x1);
    lo = bf16x2(remainder_of(x0, __uint_as_float(hi << 16)), remainder_of(x1, __uint_as_float(hi & 0xffff0000u)));
}
"""
SPLIT_BF16_CU = (
    SPLIT_FN_CU
    + r"""
// The hi and lo parts of A's na4 and B's nb4 float4s, one pass over both.
extern "C" __global__ void split_bf16(const float4* __restrict__ a, long long na4, const float4* __restrict__ b,
                                      long long nb4, uint2* __restrict__ a_hi, uint2* __restrict__ a_lo,
                                      uint2* __restrict__ b_hi, uint2* __restrict__ b_lo)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < na4 + nb4; i += stride) {
        const bool in_a = i < na4;
        const long long j = in_a ? i : i - na4;
        const float4 v = in_a ? a[j] : b[j];
        uint2 hi, lo;
        split2(v.x, v.y, hi.x, lo.x);
        split2(v.z, v.w, hi.y, lo.y);
        (in_a ? a_hi : b_hi)[j] = hi;
        (in_a ? a_lo : b_lo)[j] = lo;
    }
}

"""
)

# A block's tile (row0, col0) in the grouped order of both bf16x3 GEMMs (this one's and templates_matmul_wgmma's):
# GROUP tile rows at a time, column by column, so that blocks resident together share tiles in L2.
GROUPED_TILE_CU = r"""    const int tiles_m = M / BM, tiles_n = N / BN;
    const int id = blockIdx.x;
    const int per_group = GROUP * tiles_n;
    const int first_m = (id / per_group) * GROUP;
    const int group_m = min(tiles_m - first_m, GROUP);
    const int row0 = (first_m + (id % per_group) % group_m) * BM;
    const int col0 = ((id % per_group) / group_m) * BN;
"""

MATMUL_BF16X3_CU = c_params(r"""
// fp32 C = A @ B as three bf16 tensor-core products of split operands (hi + lo), fp32 accumulation.
@SUMMARY_C@
// M, N and K are multiples of BM, BN and BK (the wrapper checks). Batched over blockIdx.y, for bmm.
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step (bf16 elements)
#param WM          // warp tile rows
#param WN          // warp tile columns
#param STAGES      // shared-memory buffers in the cp.async pipeline
#param MIN_BLOCKS  // blocks an SM must hold (caps the registers per thread)
#param PROMOTE     // 1: each K step accumulates in fresh registers, added to the total with rounded adds
#param GROUP       // tile rows per group of the block order
#param B_COL       // 1: B is given as its (N, K) transpose, rows of K (a linear layer's weight); 0: (K, N) rows
#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (WARPS_M * WARPS_N * 32)
#define MI (WM / 16)
#define NI (WN / 8)
#define A_LD (BK + 8)  // 16 bytes of padding a row: an ldmatrix's eight rows fall on different banks
#if B_COL
#define B_LD (BK + 8)  // B's tile as BN rows of K, like A's
#define B_TILE (BN * B_LD)
#else
#define B_LD (BN + 8)
#define B_TILE (BK * B_LD)
#endif
#define A_TILE (BM * A_LD)
#define STAGE_ELEMS (2 * A_TILE + 2 * B_TILE)  // hi and lo tiles of A, then of B

static_assert(NI % 2 == 0, "B fragments are read two n8 blocks at a time");
static_assert((BM * BK / 8) % THREADS == 0 && (BK * BN / 8) % THREADS == 0, "tile loads divide over threads");

@SPLIT_CU@__device__ __forceinline__ void cp_async16(bf16_bits* smem, const bf16_bits* gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const bf16_bits* p)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// The same, each matrix transposed: B's k-major rows become the column-major fragment mma wants.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const bf16_bits* p)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, const unsigned* b)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_bf16x3(const bf16_bits* __restrict__ Ah, const bf16_bits* __restrict__ Al, const bf16_bits* __restrict__ Bh,
              const bf16_bits* __restrict__ Bl, float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) bf16_bits smem[];
    const size_t a_off = (size_t)blockIdx.y * M * K, b_off = (size_t)blockIdx.y * K * N;
    Ah += a_off;
    Al += a_off;
    Bh += b_off;
    Bl += b_off;
    C += (size_t)blockIdx.y * M * N;

@GROUPED_TILE@
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const int g = lane / 4, t = lane % 4;

    auto load_stage = [&](int stage, int k0) {
        bf16_bits* s = smem + stage * STAGE_ELEMS;
#pragma unroll
        for (int l = 0; l < BM * BK / 8 / THREADS; ++l) {
            const int i = tid + l * THREADS;
            const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
            const size_t at = (size_t)(row0 + r) * K + k0 + c;
            cp_async16(s + r * A_LD + c, Ah + at);
            cp_async16(s + A_TILE + r * A_LD + c, Al + at);
        }
#pragma unroll
        for (int l = 0; l < BK * BN / 8 / THREADS; ++l) {
            const int i = tid + l * THREADS;
#if B_COL
            const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
            const size_t at = (size_t)(col0 + r) * K + k0 + c;
#else
            const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
            const size_t at = (size_t)(k0 + r) * N + col0 + c;
#endif
            cp_async16(s + 2 * A_TILE + r * B_LD + c, Bh + at);
            cp_async16(s + 2 * A_TILE + B_TILE + r * B_LD + c, Bl + at);
        }
    };

@MMA_STEP_BEGIN@
        const bf16_bits* s = smem + (kt % STAGES) * STAGE_ELEMS;
        const bf16_bits* as_hi = s + (wm + lane % 16) * A_LD + (lane / 16) * 8;
#if B_COL
        // Matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) of each pair of n8 blocks.
        const bf16_bits* bs_hi = s + 2 * A_TILE + (wn + lane % 8 + (lane / 16) * 8) * B_LD + (lane / 8 % 2) * 8;
#else
        // Matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), each transposed.
        const bf16_bits* bs_hi = s + 2 * A_TILE + (lane % 16) * B_LD + wn + (lane / 16) * 8;
#endif
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned ah[MI][4], al[MI][4], bh[NI][2], bl[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                ldmatrix_x4(ah[i], as_hi + i * 16 * A_LD + kk);
                ldmatrix_x4(al[i], as_hi + A_TILE + i * 16 * A_LD + kk);
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned r[4];
#if B_COL
                ldmatrix_x4(r, bs_hi + j * 8 * B_LD + kk);
#else
                ldmatrix_x4_trans(r, bs_hi + kk * B_LD + j * 8);
#endif
                bh[j][0] = r[0], bh[j][1] = r[1], bh[j + 1][0] = r[2], bh[j + 1][1] = r[3];
#if B_COL
                ldmatrix_x4(r, bs_hi + B_TILE + j * 8 * B_LD + kk);
#else
                ldmatrix_x4_trans(r, bs_hi + B_TILE + kk * B_LD + j * 8);
#endif
                bl[j][0] = r[0], bl[j][1] = r[1], bl[j + 1][0] = r[2], bl[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    mma_bf16(ACC[i][j], al[i], bh[j]);  // the small terms first
                    mma_bf16(ACC[i][j], ah[i], bl[j]);
                    mma_bf16(ACC[i][j], ah[i], bh[j]);
                }
        }
@MMA_STEP_END@
""")

# The start and the end of ``_mm_bf16x3``, alike in this GEMM's module and in templates_matmul_wgmma's: its
# contract and the size and alignment checks (all a GEMM that splits its own tiles needs), one bfloat16 buffer for
# both operands' parts; then, after each one's split, the GEMM's launch (each module defines the _GEMM_* constants).
MM_CHECKS_PY = r'''
def _mm_bf16x3(
    A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, batch: int, M: int, N: int, K: int, *tail: int
) -> None:
    """C = A @ B from three bfloat16 products, for contiguous float32 CUDA tensors: A (batch, M, K), B @B_SHAPE@,
    C (batch, M, N). ``tail``: the pointers of the pointwise tail's operands, for a GEMM built to apply one to C."""
    if len(tail) != _TAIL_OPERANDS:
        raise ValueError(f"this GEMM takes {_TAIL_OPERANDS} tail operand(s), got {len(tail)}")
    if M % _GEMM_BM or N % _GEMM_BN or K % _GEMM_BK or batch > 65535 or (M // _GEMM_BM) * (N // _GEMM_BN) >= 2**31:
        raise ValueError(
            f"this kernel needs M % {_GEMM_BM}, N % {_GEMM_BN}, K % {_GEMM_BK} == 0; got M={M} N={N} K={K}"
        )
    if A.data_ptr() % 16 or B.data_ptr() % 16:
        raise ValueError("this kernel reads A and B in 16-byte pieces: both must start on a 16-byte boundary")
'''
MM_PARTS_PY = (
    MM_CHECKS_PY
    + r"""    na, nb = A.numel(), B.numel()
    # A's hi and lo parts, then B's: bfloat16, @PARTS_LAYOUT@.
    parts = torch.empty(2 * (na + nb), device=A.device, dtype=torch.bfloat16)
    a_hi = parts.data_ptr()
    a_lo, b_hi = a_hi + 2 * na, a_hi + 4 * na
    b_lo = b_hi + 2 * nb
"""
)
MM_LAUNCH_PY = r"""    grid = ((M // _GEMM_BM) * (N // _GEMM_BN), batch)
    args = (a_hi, a_lo, b_hi, b_lo, C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K), *tail)
    _run_kernel(_GEMM, A.device, grid, (_GEMM_THREADS,), args, shared_mem=_GEMM_SMEM)
"""

# The GEMM's module-level Python, the same in a matmul candidate and in an epilogue candidate whose heavy op it
# runs: its CUDA source, the two kernels and ``_mm_bf16x3``.
MM_BF16X3_PY = (
    r'''GEMM_SRC = r"""@GEMM_SRC@"""

_GEMM_BM, _GEMM_BN, _GEMM_BK, _GEMM_THREADS, _GEMM_SMEM = @BM@, @BN@, @BK@, @THREADS@, @SMEM@
_TAIL_OPERANDS = 0  # this GEMM stores C as computed
_SPLIT = cupy.RawKernel(GEMM_SRC, "split_bf16", options=("-std=c++17",))
_GEMM = cupy.RawKernel(GEMM_SRC, "matmul_bf16x3", options=("-std=c++17",))
_GEMM.max_dynamic_shared_size_bytes = _GEMM_SMEM

'''
    + MM_PARTS_PY
    + r"""    n4 = (na + nb) // 4
    split_args = (A.data_ptr(), cupy.int64(na // 4), B.data_ptr(), cupy.int64(nb // 4), a_hi, a_lo, b_hi, b_lo)
    if n4:  # K = 0 leaves nothing to split; the GEMM then writes zeros
        _run_kernel(_SPLIT, A.device, (min(-(-n4 // 256), 32 * _sm_count(A.device)),), (256,), split_args)
"""
    + MM_LAUNCH_PY
)

# An epilogue candidate's heavy op when it is a linear layer: x @ weight.T by the kernel built with B_COL.
LINEAR_BF16X3_PY = r'''

def _linear_bf16x3(x: torch.Tensor, weight: torch.Tensor, *tail: int) -> torch.Tensor:
    """x @ weight.T for a float32 x (..., K) and a linear layer's weight (N, K), by _mm_bf16x3 (``tail``: its
    tail operands' pointers, for a GEMM that applies the pointwise tail)."""
    N, K = weight.shape
    if x.shape[-1] != K:
        raise ValueError(f"cannot multiply {tuple(x.shape)} by a ({N}, {K}) weight's transpose")
    x, weight = x.contiguous(), weight.detach().contiguous()
    out = torch.empty((*x.shape[:-1], N), device=x.device, dtype=torch.float32)
    if out.numel():
        _mm_bf16x3(x, weight, out, 1, x.numel() // K, N, K, *tail)
    return out
'''

MATMUL_BF16X3_PY = (
    r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul):
M a multiple of @BM@, N of @BN@, K of @BK@. Computes in bfloat16 (three products of split operands).
"""

import cupy
import torch
import torch.nn as nn

_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T
@STREAM_PY@
@MM_BF16X3_PY@

'''
    + MATMUL_OPERANDS_PY
    + r"""
        C = torch.empty(out_shape, device=A.device, dtype=torch.float32)
        if C.numel():
            _mm_bf16x3(A, B, C, batch, M, N, K)
        return C
"""
)


def smem_bytes(params: dict[str, Any], b_col: bool = False) -> int:
    """Dynamic shared memory of one block: hi and lo tiles of A and B for every stage, rows padded by 8."""
    bm, bn, bk = params["bm"], params["bn"], params["bk"]
    b_tile = bn * (bk + 8) if b_col else bk * (bn + 8)
    return params["stages"] * 2 * (bm * (bk + 8) + b_tile) * 2


def registers(params: dict[str, Any]) -> int:
    """An estimate of a thread's registers: accumulators (twice with promotion), one K slice's hi and lo
    fragments of A and B, and ~40 for addresses and the loop."""
    wm, wn = WARP_TILES[params["warp"]]
    accumulators = wm * wn // 32 * (2 if params["promote"] else 1)
    return accumulators + (wm // 16) * 8 + (wn // 8) * 4 + 40


def valid(params: dict[str, Any], b_col: bool = False) -> bool:
    """Whole warps, 128-512 threads, tile loads that divide over them, the blocks an SM must hold within its
    228 KiB of shared memory (1 KiB of it reserved per block) and 64 Ki registers, at most 255 a thread."""
    n = threads(params)
    bm, bn, bk, blocks = params["bm"], params["bn"], params["bk"], params["min_blocks"]
    regs, smem = registers(params), smem_bytes(params, b_col)
    return (
        128 <= n <= 512
        and (bm * bk // 8) % n == 0
        and (bk * bn // 8) % n == 0
        and smem <= 227 * 1024
        and blocks * (smem + 1024) <= 228 * 1024
        and regs <= 255
        and blocks * n * regs <= 65536
    )


def mm_module_py(params: dict[str, Any], summary: str, b_col: bool = False) -> str:
    """The GEMM's module-level Python (``MM_BF16X3_PY``) for one point; ``b_col``: B given as (N, K) rows."""
    cu = fill_gemm(
        MATMUL_BF16X3_CU,
        params,
        summary,
        SPLIT_CU=SPLIT_BF16_CU,
        GROUPED_TILE=GROUPED_TILE_CU,
        MIN_BLOCKS=params["min_blocks"],
        B_COL=c_bool(b_col),
    )
    return fill(
        MM_BF16X3_PY,
        GEMM_SRC=cu,
        BM=params["bm"],
        BN=params["bn"],
        BK=params["bk"],
        THREADS=threads(params),
        SMEM=smem_bytes(params, b_col),
        B_SHAPE="(N, K) rows" if b_col else "(batch, K, N)",
        PARTS_LAYOUT="each in its operand's layout",
    )


def render_wrapper(template: str, params: dict[str, Any], summary: str, module_py: str, bm: int, bk: int) -> str:
    """A bf16x3 matmul candidate (``MATMUL_BF16X3_PY``) around one GEMM's module-level Python, this one's or
    templates_matmul_wgmma's."""
    return fill(
        MATMUL_BF16X3_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        MM_BF16X3_PY=module_py,
        BM=bm,
        BN=params["bn"],
        BK=bk,
        TRANSPOSED=transposed(params),
    )


def render_matmul_bf16x3(params: dict[str, Any], summary: str) -> str:
    module_py = mm_module_py(params, summary)
    return render_wrapper("matmul_cuda_bf16x3", params, summary, module_py, params["bm"], params["bk"])
