"""``matmul_cuda_bulk``: fp32 GEMM on the CUDA cores whose tiles arrive by the bulk-copy engine (strict policy).

``matmul_cuda_simt`` stages every K step's tiles through registers: each thread loads its share from global
memory, then stores it (A's transposed) into shared memory, and the block meets at a barrier once a step. Those
loads, stores, their addresses and the barrier are about 5% of what its threads issue, and ncu put 6% of its warps'
waits on the barrier (bench/RESULTS.md). Here thread 0 asks Hopper's copy engine for each K step's two tiles,
several steps ahead, and the threads only read shared memory and multiply:

- A is transposed once (``pack_a``, one pass over A) into a scratch copy where each block row's K-step tile is one
  contiguous piece laid out as the FFMA loop reads it (``As[k][m]``): one ``cp.async.bulk`` a step;
- B's tile comes from B itself through a tensor map (``cp.async.bulk.tensor``, BK rows of BN floats), or, with
  ``b_tiles="packed"``, from a packed copy like A's (one more pass, 49 us on 4096² on an H100). With BK 8, copying
  each tile row by row (16 copies of 512 bytes a step) took 3.79 ms against 3.12 for one copy a tile: the engine
  takes few large requests far better than many small ones (bench/RESULTS.md);
- STAGES buffers, each with a "full" mbarrier (the copies' bytes complete it) and an "empty" one (one arrival a
  warp once it has read the buffer: 256 threads arriving each cost 0.4 ms on 4096²); no block-wide barrier;
- thread 0 refills a buffer LAG steps after it was read, so that it seldom waits for a slower warp;
- the FFMA loop is ``matmul_cuda_simt``'s: TM x TN outputs a thread in four quadrants half a tile apart, warps of
  4 x 8 threads, the next K slice's fragments read during the current slice's FFMAs, the next step's first slice
  read before this step's last FFMAs, grouped block order, optionally serpentine.

On 4096² on an H100 the GEMM takes 2.60 ms where cuBLAS's SGEMM takes 2.66 and ``matmul_cuda_simt`` 2.78; with A's
transposing pass (46 us) the candidate runs 1.007x cuBLAS. BK 32 with three buffers, two 128 x 128 blocks an SM,
was the fastest point measured; BK 8 and 16 lose to the copies' and barriers' fixed costs per step.

Each output is one fp32 accumulator, one fused multiply-add per k, in K order: the same sums as cuBLAS's SGEMM.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import MATMUL_OPERANDS_PY
from agents.builtin.templates_matmul_simt import micro_tile_values

MATMUL_BULK_CU = c_params(r"""
// fp32 C = A @ B on the CUDA cores (FFMA, fp32 accumulate, no tensor cores): the strict policy's GEMM.
@SUMMARY_C@
// `pack_a` (and `pack_b` where B_MAP is 0) lay each block's K-step tiles out contiguously; `matmul_bulk` multiplies
// them. M, N and K are multiples of BM, BN and 32; A, B and C 16-byte aligned (the wrapper checks). Batched over
// blockIdx.y (blockIdx.z for pack_a).
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step
#param TM          // rows of C per thread (8 or 16): two runs of TM / 2, half a tile apart
#param TN          // columns of C per thread, likewise
#param STAGES      // shared-memory buffers of a K step's two tiles
#param LAG         // thread 0 refills a buffer this many steps after it was read
#param MIN_BLOCKS  // blocks an SM must hold (caps the registers per thread)
#param SERPENTINE  // 1: odd rows of the micro-tile take their columns backwards
#param GROUP       // tile rows per group of the block order
#param B_MAP       // 1: B's tiles copied from B itself through a tensor map; 0: from the packed copy Bp
#define HM (TM / 2)
#define HN (TN / 2)
#define TX (BN / TN)  // threads across a tile's columns
#define TY (BM / TM)  // threads down its rows
#define THREADS (TX * TY)
#define STAGE_FLOATS (BK * (BM + BN))

static_assert(HM % 4 == 0 && HN % 4 == 0, "a thread's runs are whole float4s");
static_assert(TX % 8 == 0 && TY % 4 == 0, "warps of 4 x 8 threads tile the block's threads");
static_assert(THREADS <= 1024, "at most 1024 threads");
static_assert(BK % 2 == 0 && LAG >= 1 && LAG < STAGES, "slices alternate two fragment sets; a refill needs a stage");
@MICRO_TILE@

// Ap[batch][M / BM][K / BK][BK][BM]: A's tile of each block row and K step, transposed, as one contiguous piece.
// 32 x 32 tiles through shared memory, a row padded so that the column reads hit 32 banks.
extern "C" __global__ void __launch_bounds__(32 * 8)
pack_a(const float* __restrict__ A, float* __restrict__ Ap, int M, int K)
{
    __shared__ float tile[32][33];
    const int k0 = blockIdx.x * 32, m0 = blockIdx.y * 32;
    A += (size_t)blockIdx.z * M * K;
    Ap += (size_t)blockIdx.z * M * K;
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) tile[j][threadIdx.x] = A[(size_t)(m0 + j) * K + k0 + threadIdx.x];
    __syncthreads();
    const int m = m0 + threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int k = k0 + j;
        Ap[(((size_t)(m / BM) * (K / BK) + k / BK) * BK + k % BK) * BM + m % BM] = tile[threadIdx.x][j];
    }
}

// Bp[batch][N / BN][K / BK][BK][BN]: B's tile of each block column and K step as one contiguous piece; a float4 a
// thread.
extern "C" __global__ void __launch_bounds__(256)
pack_b(const float4* __restrict__ B, float4* __restrict__ Bp, int N, int K)
{
    const size_t quads = (size_t)K * N / 4;
    B += (size_t)blockIdx.y * quads;
    Bp += (size_t)blockIdx.y * quads;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
        const int k = (int)(i / (N / 4)), n = 4 * (int)(i % (N / 4));
        Bp[((((size_t)(n / BN) * (K / BK) + k / BK) * BK + k % BK) * BN + n % BN) / 4] = B[i];
    }
}

// CUtensorMap: 128 opaque bytes, 64-byte aligned, encoded on the host by cuTensorMapEncodeTiled.
struct __align__(64) TensorMap {
    unsigned long long words[16];
};

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ bool try_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    while (!try_wait(bar, parity)) {
    }
}

__device__ __forceinline__ void arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_bulk(const float* __restrict__ Ap, const float* __restrict__ Bp, const __grid_constant__ TensorMap b_map,
            float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) float tiles[];  // STAGES x {A's tile [BK][BM], B's tile [BK][BN]}
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];

    const int tiles_m = M / BM, tiles_n = N / BN;
    int tm, tn;
    block_tile(tiles_m, tiles_n, tm, tn);

    const float* ap = Ap + ((size_t)blockIdx.y * tiles_m + tm) * K * BM;  // this block row's K steps, in order
    const float* bp = Bp + ((size_t)blockIdx.y * tiles_n + tn) * K * BN;
    float* c = C + (size_t)blockIdx.y * M * N + (size_t)tm * BM * N + (size_t)tn * BN;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int ty = (warp / (TX / 8)) * 4 + lane / 8;  // this thread's rows: HM * ty + 0..HM-1, then BM / 2 more
    const int tx = (warp % (TX / 8)) * 8 + lane % 8;  // its columns: HN * tx + 0..HN-1, then BN / 2 more
    const int steps = K / BK;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])) : "memory");
            const unsigned warps = THREADS / 32;  // one arrival a warp
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&empty[s])), "r"(warps) : "memory");
        }
        // The copy engine (the async proxy) must see the initialised barriers.
        asm volatile("fence.mbarrier_init.release.cluster;\n fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    // Thread 0 only: one K step's two tiles copied into its stage; their bytes complete the stage's full barrier.
    auto issue = [&](int step) {
        const int s = step % STAGES;
        const unsigned bar = smem_u32(&full[s]);
        const unsigned as = smem_u32(tiles + s * STAGE_FLOATS), bs = as + BK * BM * 4;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(STAGE_FLOATS * 4)
                     : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(as), "l"(ap + (size_t)step * BK * BM), "r"(BK * BM * 4), "r"(bar) : "memory");
        if (B_MAP) {
            // The box (BN columns, BK rows, one batch entry) at this block's columns and the step's rows.
            asm volatile(
                "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
                "[%5];" ::"r"(bs), "l"(reinterpret_cast<unsigned long long>(&b_map)), "r"(tn * BN), "r"(step * BK),
                "r"((int)blockIdx.y), "r"(bar) : "memory");
        } else {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(bs), "l"(bp + (size_t)step * BK * BN), "r"(BK * BN * 4), "r"(bar) : "memory");
        }
    };
    if (tid == 0) {
        for (int step = 0; step < min(STAGES, steps); ++step) issue(step);
    }

    // Float4 q of a K slice's fragments: the thread's first run of rows (columns), then its second.
    float4 fa[2][TM / 4], fb[2][TN / 4];  // [slice parity][q]
    auto fragments = [&](int s, int k, int p) {
        const float* as = tiles + s * STAGE_FLOATS + k * BM;
        const float* bs = tiles + s * STAGE_FLOATS + BK * BM + k * BN;
#pragma unroll
        for (int q = 0; q < TM / 4; ++q) {
            const int m = (q < HM / 4 ? 0 : BM / 2) + HM * ty + 4 * (q % (HM / 4));
            fa[p][q] = *reinterpret_cast<const float4*>(as + m);
        }
#pragma unroll
        for (int q = 0; q < TN / 4; ++q) {
            const int n = (q < HN / 4 ? 0 : BN / 2) + HN * tx + 4 * (q % (HN / 4));
            fb[p][q] = *reinterpret_cast<const float4*>(bs + n);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    wait_phase(smem_u32(&full[0]), 0);
    fragments(0, 0, 0);
    for (int t = 0; t < steps; ++t) {
        const int s = t % STAGES;
        if (tid == 0 && t >= LAG && t - LAG + STAGES < steps) {
            const int read = t - LAG;  // the step whose buffer is refilled, once every warp has read it
            wait_phase(smem_u32(&empty[read % STAGES]), (read / STAGES) & 1);
            issue(read + STAGES);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const int p = k & 1;
            if (k + 1 < BK) {
                fragments(s, k + 1, p ^ 1);  // the next slice's reads overlap this slice's FFMAs
            } else {
                // This stage's last slice is in registers: release the buffer, and read the next step's first slice
                // while this one's FFMAs run.
                // One arrival a warp: 256 threads arriving on one mbarrier serialise (0.4 ms of 4.2 on 4096² at BK 8).
                // __syncwarp orders the other lanes' reads of the buffer before lane 0's arrival.
                __syncwarp();
                if (lane == 0) arrive(smem_u32(&empty[s]));
                if (t + 1 < steps) {
                    wait_phase(smem_u32(&full[(t + 1) % STAGES]), ((t + 1) / STAGES) & 1);
                    fragments((t + 1) % STAGES, 0, p ^ 1);
                }
            }
            multiply_slice(acc, fa[p], fb[p]);
        }
    }

    store_tile(c, N, ty, tx, acc);
}
""")


def threads(params: dict[str, Any]) -> int:
    return (params["bm"] // params["tm"]) * (params["bn"] // params["tn"])


def shared_bytes(params: dict[str, Any]) -> int:
    """Dynamic shared memory a block asks for: every stage's two tiles."""
    return params["stages"] * params["bk"] * (params["bm"] + params["bn"]) * 4


def cuda_source(params: dict[str, Any], summary: str) -> str:
    return fill(
        MATMUL_BULK_CU,
        **micro_tile_values(params, summary),
        STAGES=params["stages"],
        LAG=params["lag"],
        B_MAP=c_bool(params["b_tiles"] == "tensor_map"),
    )


MATMUL_BULK_PY = (
    r'''"""Builtin candidate `matmul_cuda_bulk` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul) on
the CUDA cores, fp32 accumulation: M a multiple of @BM@, N of @BN@, K of 32. A is first transposed into a scratch
tensor (one pass over A), so that each K step's tile of A is one contiguous piece the bulk-copy engine can fetch.
"""

import cupy
import numpy
import torch
import torch.nn as nn
from cuda.bindings import driver

CUDA_SRC = r"""@CUDA_SRC@"""

_BM, _BN, _THREADS, _SMEM = @BM@, @BN@, @THREADS@, @SMEM@  # _SMEM: dynamic shared memory, every stage's tiles
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T
_BK, _B_MAP = @BK@, @B_MAP@
_TENSOR_MAP = numpy.dtype([("words", numpy.uint64, (16,))])  # the kernel's TensorMap: CUtensorMap's 128 bytes


def _b_map(B: torch.Tensor, batch: int, K: int, N: int) -> numpy.void:
    """A tensor map of B (N columns, K rows, batch) whose box is one block's tile of one K step."""
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        3,
        B.data_ptr(),
        [driver.cuuint64_t(d) for d in (N, K, batch)],
        [driver.cuuint64_t(d) for d in (N * 4, K * N * 4)],  # bytes between rows, between batch entries
        [driver.cuuint32_t(d) for d in (_BN, _BK, 1)],
        [driver.cuuint32_t(1)] * 3,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    return numpy.array([int(w) for w in tensor_map.opaque], dtype=numpy.uint64).view(_TENSOR_MAP)[0]


_NO_MAP = numpy.zeros(1, dtype=_TENSOR_MAP)[0]
_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_function("matmul_bulk").max_dynamic_shared_size_bytes = _SMEM  # the opt-in above 48 KiB
'''
    + MATMUL_OPERANDS_PY
    + r"""
        if M % _BM or N % _BN or K % 32 or batch > 65535 or (M // _BM) * (N // _BN) >= 2**31:
            raise ValueError(f"this kernel needs M % {_BM}, N % {_BN}, K % 32 == 0; got M={M} N={N} K={K}")
        if A.data_ptr() % 16 or B.data_ptr() % 16:
            raise ValueError("this kernel reads A and B in 16-byte pieces: both must start on a 16-byte boundary")
        if K == 0:
            return torch.zeros(out_shape, device=A.device, dtype=torch.float32)  # no K step would fill a buffer
        C = torch.empty(out_shape, device=A.device, dtype=torch.float32)
        if C.numel() == 0:
            return C
        Ap = torch.empty((batch, M * K), device=A.device, dtype=torch.float32)
        m, n, k = cupy.int32(M), cupy.int32(N), cupy.int32(K)
        pack_a_args = (A.data_ptr(), Ap.data_ptr(), m, k)
        _run_kernel(_function("pack_a"), A.device, (K // 32, M // 32, batch), (32, 8), pack_a_args)
        if _B_MAP:
            Bp, b_map = B, _b_map(B, batch, K, N)
        else:
            Bp, b_map = torch.empty((batch, K * N), device=A.device, dtype=torch.float32), _NO_MAP
            pack_b_grid = (min(-(-K * N // 1024), 8 * _sm_count(A.device)), batch)
            _run_kernel(_function("pack_b"), A.device, pack_b_grid, (256,), (B.data_ptr(), Bp.data_ptr(), n, k))
        grid = ((M // _BM) * (N // _BN), batch)
        args = (Ap.data_ptr(), Bp.data_ptr(), b_map, C.data_ptr(), m, n, k)
        _run_kernel(_function("matmul_bulk"), A.device, grid, (_THREADS,), args, shared_mem=_SMEM)
        return C
"""
)


def valid(params: dict[str, Any]) -> bool:
    """Warps of 4 x 8 threads; every stage's tiles within the 227 KiB of shared memory an SM has, for the blocks an
    SM must hold; registers for the accumulators and ~56 more a thread; a refill lag shorter than the stages."""
    tx, ty = params["bn"] // params["tn"], params["bm"] // params["tm"]
    blocks = params["min_blocks"]
    registers = threads(params) * blocks * (params["tm"] * params["tn"] + 56)
    smem = blocks * (shared_bytes(params) + 1024)  # the driver reserves 1 KiB a block
    fits = registers <= 65536 and smem <= 227 * 1024
    return tx % 8 == 0 and ty % 4 == 0 and fits and params["lag"] < params["stages"]


def render_matmul_bulk(params: dict[str, Any], summary: str) -> str:
    return fill(
        MATMUL_BULK_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cuda_source(params, summary),
        BM=params["bm"],
        BN=params["bn"],
        THREADS=threads(params),
        SMEM=shared_bytes(params),
        BK=params["bk"],
        B_MAP=c_bool(params["b_tiles"] == "tensor_map"),
        TRANSPOSED=transposed(params),
    )
