"""LayerNorm for a few very long rows, two ways.

``layernorm_cuda_wide``: two kernels that move the fewest bytes without holding anything on chip. Kernel 1 reads
x once for the statistics (``split`` blocks per row, shifted sums, ``unroll`` float4 loads in flight per
thread). Kernel 2 tiles the columns: a block loads its tile of the weight and bias once into registers and
normalises that tile for a group of ``rows_per_block`` rows, so the weight and bias cross the memory system once
per group instead of once per row (``layernorm_cuda_split`` reads them once per row: 512 MiB of
extra L2 traffic on the (16, 64, 256, 256) problem). ``tail_first`` walks each group's rows last to first:
kernel 1 read the last rows most recently, so they are the ones still in L2 (no gain measurable on the H200:
bench/RESULTS.md). On that problem the two kernels move 800 MiB at 88% of the copy ceiling.

``layernorm_cuda_persistent``: one cooperatively launched grid of ``per_sm`` blocks per SM, each owning one
contiguous chunk of every row's columns. The weight's chunk stays in shared memory and the bias's in registers
for the whole call, so they are read from memory once. Rows go one at a time: the blocks add their chunk's
shifted sums into per-row partials, wait for the row's arrival counter, and normalise their chunk, reading x a
second time while it is still in L2 (the grid works on one 16 MiB row at a time; with two rows in flight the
H200's L2 kept too little). L2 eviction hints (``hints``) keep x's first read and drop its last read and y.
While the grid waits, the first ``stage`` float4 per thread of the next row are already on their way into
shared memory (cp.async), so the memory system is not idle over the wait. DRAM then sees x once, y once and the
weight and bias once (ncu: 303 MB read and 243 MB written on (16, 64, 256, 256)).

With ``hold`` the block keeps x's chunk itself, in ``hold`` shared-memory buffers (row r in buffer r % hold): the
next row (two: the next two rows) is fetched whole while the grid waits, and both statistics and normalising read
it there, so nothing depends on L2 keeping x. With three buffers a block computes row r + 1's statistics before
normalising row r, so the grid-wide wait for row r is a row's work old when it comes; the weight's chunk then no
longer fits beside them and is read from L2 (evict_last) each row. Three chunks must fit a block's shared
memory, which rows of up to about 2 Mi elements do with one block per SM.

The kernel sources are raw string literals whose ``#ifndef`` defaults are the chosen parameters, like
``templates_layernorm_rows_cuda``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, wrap
from agents.builtin.candidate_python import LAYERNORM_FORWARD_PY
from agents.builtin.templates_layernorm_rows_cuda import LAYERNORM_COMMON, layernorm_candidate

LAYERNORM_WIDE_CU = c_params(r"""
// LayerNorm for a few long rows: statistics kernel, then a column-tiled normalising kernel.
@SUMMARY_C@
#param BLOCK        // threads per block (both kernels)
#param SPLIT        // statistics blocks per row
#param UNROLL       // float4 per thread per step (loads in flight)
#param ROWS         // rows per normalising block (the weight and bias are loaded once for them)
#param TAIL_FIRST   // normalise a block's rows last to first (the last rows read are still in L2)
@COMMON@
// Rows are cols (a multiple of 4) floats and every pointer is 16-byte aligned (the wrapper sees to it).
__device__ __forceinline__ long long chunk_len(long long cols) { return ((cols + SPLIT - 1) / SPLIT + 3) / 4 * 4; }

// Block (j, row): Welford triple (n, mean, m2) of chunk j. Threads sum x - shift and its square, where shift is
// the row's first element, so the variance does not cancel when |mean| is large against the spread.
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_stats(const float* __restrict__ x, float* __restrict__ part, long long cols)
{
    const long long row = blockIdx.y;
    const float* xr = x + row * cols;
    const float shift = __ldg(xr);
    const long long chunk = chunk_len(cols);
    const long long lo = min(cols, blockIdx.x * chunk), hi = min(cols, lo + chunk);
    const float4* p = reinterpret_cast<const float4*>(xr + lo);
    const long long n4 = (hi - lo) / 4;
    float s = 0.0f, q = 0.0f, c = 0.0f;
    long long i = threadIdx.x;
    for (; i + (UNROLL - 1) * BLOCK < n4; i += UNROLL * BLOCK) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = p[i + u * BLOCK];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const float a = v[u].x - shift, b = v[u].y - shift, d = v[u].z - shift, e = v[u].w - shift;
            s += (a + b) + (d + e);
            q += (a * a + b * b) + (d * d + e * e);
        }
        c += 4.0f * UNROLL;
    }
    for (; i < n4; i += BLOCK) {
        const float4 v = p[i];
        const float a = v.x - shift, b = v.y - shift, d = v.z - shift, e = v.w - shift;
        s += (a + b) + (d + e);
        q += (a * a + b * b) + (d * d + e * e);
        c += 4.0f;
    }
    Welford w = {c, c > 0.0f ? s / c : 0.0f, c > 0.0f ? fmaxf(q - s * (s / c), 0.0f) : 0.0f};
    __shared__ Welford warps[WARPS];
    w = welford_block(w, warps);
    if (threadIdx.x == 0) {
        float* o = part + 3 * (row * SPLIT + blockIdx.x);
        o[0] = w.n;
        o[1] = w.mean + shift;
        o[2] = w.m2;
    }
}

// Block (tile, group): merge the group's partials, then y = (x - mean) * rstd * weight + bias over one column
// tile of BLOCK * UNROLL float4 for each row of the group.
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_apply(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                const float* __restrict__ part, float* __restrict__ y, int rows, long long cols, float eps)
{
    __shared__ float2 stats[ROWS];
    const int r0 = blockIdx.y * ROWS;
    const int nr = min(ROWS, rows - r0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < nr; r += WARPS) {
        Welford w = {0.0f, 0.0f, 0.0f};
        const float* p = part + 3 * (long long)(r0 + r) * SPLIT;
        for (int k = lane; k < SPLIT; k += 32) {
            const Welford o = {p[3 * k], p[3 * k + 1], p[3 * k + 2]};
            welford_merge(w, o);
        }
        welford_warp(w);
        if (lane == 0) stats[r] = make_float2(w.mean, rsqrtf(w.m2 / (float)cols + eps));  // biased variance
    }
    __syncthreads();
    const long long n4 = cols / 4;
    const long long first = blockIdx.x * (long long)(BLOCK * UNROLL) + threadIdx.x;
    float4 g[UNROLL], b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = first + u * BLOCK;
        if (i < n4) {
            g[u] = __ldg(reinterpret_cast<const float4*>(weight) + i);
            b[u] = __ldg(reinterpret_cast<const float4*>(bias) + i);
        }
    }
#pragma unroll 2
    for (int k = 0; k < nr; ++k) {
        const int r = TAIL_FIRST ? nr - 1 - k : k;
        const float mean = stats[r].x, rstd = stats[r].y;
        const float4* xr = reinterpret_cast<const float4*>(x + (long long)(r0 + r) * cols);
        float4* yr = reinterpret_cast<float4*>(y + (long long)(r0 + r) * cols);
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long i = first + u * BLOCK;
            if (i < n4) v[u] = __ldcs(xr + i);  // read for the last time: evict first
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long i = first + u * BLOCK;
            if (i < n4) {
                float4 o;
                o.x = fmaf((v[u].x - mean) * rstd, g[u].x, b[u].x);
                o.y = fmaf((v[u].y - mean) * rstd, g[u].y, b[u].y);
                o.z = fmaf((v[u].z - mean) * rstd, g[u].z, b[u].z);
                o.w = fmaf((v[u].w - mean) * rstd, g[u].w, b[u].w);
                __stcs(yr + i, o);
            }
        }
    }
}
""")

_LAUNCH_WIDE = """if cols % 4:
            raise ValueError(f"rows of {cols} elements: this kernel takes multiples of 4")
        if x.data_ptr() % 16:
            x = x.clone()  # a fresh allocation is aligned; the kernels read float4
        part = torch.empty(3 * rows * _SPLIT, dtype=torch.float32, device=x.device)
        stats = _function("layernorm_stats")
        apply = _function("layernorm_apply")
        _run_kernel(stats, x.device, (_SPLIT, rows), (_THREADS,), (x.data_ptr(), part.data_ptr(), cupy.int64(cols)))
        tiles = -(-cols // (4 * _THREADS * @UNROLL@))
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), part.data_ptr(), y.data_ptr())
        args = (*ptrs, cupy.int32(rows), cupy.int64(cols), cupy.float32(EPS))
        _run_kernel(apply, x.device, (tiles, -(-rows // @ROWS@)), (_THREADS,), args)"""


def render_layernorm_wide(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        LAYERNORM_WIDE_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        SPLIT=params["split"],
        UNROLL=params["unroll"],
        ROWS=params["rows_per_block"],
        TAIL_FIRST=c_bool(params["tail_first"]),
        COMMON=LAYERNORM_COMMON,
    )
    launch = fill(_LAUNCH_WIDE, UNROLL=params["unroll"], ROWS=params["rows_per_block"])
    return layernorm_candidate("layernorm_cuda_wide", params, summary, cu, params["split"], launch)


LAYERNORM_PERSISTENT_CU = c_params(r"""
// LayerNorm for a few very long rows: a persistent cooperative grid, the weight and bias held on chip, rows one at
// a time (statistics, one grid-wide wait, then normalise with x re-read from L2).
@SUMMARY_C@
#param BLOCK        // threads per block
#param PER_SM       // blocks per SM (the register budget is set for it)
#param ITEMS        // float4 per thread of each row's chunk: the bias's chunk in registers, the weight's in smem
#param UNROLL       // float4 loads in flight per thread
#param STAGE        // float4 per thread of the next row fetched into shared memory while the grid waits
#param HINTS        // L2 eviction hints: keep x's first read, drop its second read and y
#param HOLD         // buffers of x's chunk in shared memory: 0 (x re-read from L2), 2 or 3 (rows fetched ahead)
#define WARPS (BLOCK / 32)
#define WEIGHT_SMEM (HOLD != 3)  // with three buffers the weight's chunk no longer fits: read from L2 each row
#if HOLD
#define STAGED ITEMS  // float4 per thread of a row that statistics and normalise read from shared memory
#define AHEAD (HOLD - 1)  // rows whose fetch is in flight while one is normalised
#else
#define STAGED STAGE
#define AHEAD 1
#endif
static_assert(HOLD == 0 || HOLD == 2 || HOLD == 3, "x held in 0, 2 or 3 buffers");

__device__ __forceinline__ float2 block_sum2(float s, float q, float2* red)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, off);
        q += __shfl_xor_sync(0xffffffffu, q, off);
    }
    __syncthreads();  // red[] is free again
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = make_float2(s, q);
    __syncthreads();
    float ts = 0.0f, tq = 0.0f;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) {
        ts += red[i].x;
        tq += red[i].y;
    }
    return make_float2(ts, tq);
}

__device__ __forceinline__ unsigned long long l2_policy_keep()
{
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ unsigned long long l2_policy_drop()
{
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ float4 load_hinted(const float4* a, unsigned long long policy)
{
    float4 v;
    asm("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
        : "l"(a), "l"(policy));
    return v;
}

__device__ __forceinline__ void store_hinted(float4* a, float4 v, unsigned long long policy)
{
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(a), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w), "l"(policy)
                 : "memory");
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, unsigned long long policy)
{
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(a), "l"(gmem), "l"(policy)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory"); }

#if HINTS
#define LOAD_FIRST(p) load_hinted(p, keep)
#define LOAD_LAST(p) load_hinted(p, drop)
#define STORE_OUT(p, v) store_hinted(p, v, drop)
#else
#define LOAD_FIRST(p) __ldcg(p)
#define LOAD_LAST(p) __ldcs(p)
#define STORE_OUT(p, v) __stcs(p, v)
#endif

// parts: rows x gridDim.x float2 (a block's sums of x - x[row, 0] and of its square; one shift per row, so
// the partials add). arrived: rows + 1 counters, zero on entry; the kernel leaves them zero for the next call.
// Every pointer is 16-byte aligned and cols a multiple of 4 (the wrapper sees to it).
extern "C" __global__ void __launch_bounds__(BLOCK, PER_SM)
layernorm_persistent(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                     float* __restrict__ y, float2* __restrict__ parts, unsigned* __restrict__ arrived, int rows,
                     long long cols, float eps)
{
    // ITEMS * BLOCK float4 of weight (WEIGHT_SMEM), then STAGE * BLOCK of the next row, or with HOLD that many
    // buffers of ITEMS * BLOCK, row r in buffer r % HOLD
    extern __shared__ float4 smem[];
    __shared__ float2 red[WARPS];
    float4* const wsm = smem;
    auto stage_of = [&](int r) { return smem + ITEMS * BLOCK * (WEIGHT_SMEM + (HOLD ? r % HOLD : 0)); };
    const int G = gridDim.x, tid = threadIdx.x;
    const long long chunk = ((cols + G - 1) / G + 3) / 4 * 4;
    const long long begin = min(cols, (long long)blockIdx.x * chunk);
    const int n4 = (int)((min(cols, begin + chunk) - begin) / 4);  // float4 of this block's chunk
    const float inv_n = 1.0f / (float)cols;
    const unsigned long long keep = l2_policy_keep(), drop = l2_policy_drop();
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    float4 bv[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = k * BLOCK + tid;
        if (WEIGHT_SMEM && j < n4) cp_async16(&wsm[j], reinterpret_cast<const float4*>(w + begin) + j, drop);
        bv[k] = j < n4 ? __ldg(reinterpret_cast<const float4*>(b + begin) + j) : zero;
    }
    cp_async_commit();

    // A thread fetches, and later reads back, only its own slots j = k * BLOCK + tid: no block barrier between
    // normalising from a buffer and refilling it.
    auto prefetch = [&](int r) {
        const float4* xp = reinterpret_cast<const float4*>(x + (long long)r * cols + begin);
        float4* const stage = stage_of(r);
#pragma unroll
        for (int k = 0; k < STAGED; ++k) {
            const int j = k * BLOCK + tid;
            if (j < n4) cp_async16(&stage[j], xp + j, HOLD ? drop : keep);  // without HOLD, re-read from L2
        }
        cp_async_commit();
    };

    // This block's partial sums of row r; then it counts itself in.
    // later: a younger row's fetch may stay in flight (HOLD == 3).
    auto statistics = [&](int r, bool staged, bool later) {
        const float* xr = x + (long long)r * cols;
        const float shift = __ldg(xr);
        const float4* xp = reinterpret_cast<const float4*>(xr + begin);
        const float4 pad = make_float4(shift, shift, shift, shift);  // adds nothing once shifted
        const float4* const stage = stage_of(r);
        if (staged && later) cp_async_wait<1>();  // each thread reads back only the slots it fetched
        else if (staged) cp_async_wait<0>();
        float s = 0.0f, q = 0.0f;
#pragma unroll
        for (int k0 = 0; k0 < ITEMS; k0 += UNROLL) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int k = k0 + u, j = k * BLOCK + tid;
                if (k < STAGED && staged) v[u] = j < n4 ? stage[j] : pad;
                else v[u] = k < ITEMS && j < n4 ? LOAD_FIRST(xp + j) : pad;
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const float a = v[u].x - shift, c = v[u].y - shift, d = v[u].z - shift, e = v[u].w - shift;
                s += (a + c) + (d + e);
                q += (a * a + c * c) + (d * d + e * e);
            }
        }
        const float2 t = block_sum2(s, q, red);
        if (tid == 0) {
            parts[(long long)r * G + blockIdx.x] = t;
            __threadfence();
            atomicAdd(&arrived[r], 1u);
        }
    };

    auto normalise = [&](int r) {
        const float* xr = x + (long long)r * cols;
        const float4* xp = reinterpret_cast<const float4*>(xr + begin);
        float4* yp = reinterpret_cast<float4*>(y + (long long)r * cols + begin);
        const float4* const held = stage_of(r);
        const float4* const wg = reinterpret_cast<const float4*>(w + begin);
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // in flight while the grid's partials are awaited
            const int j = u * BLOCK + tid;
            if (u < ITEMS && j < n4) v[u] = HOLD ? held[j] : LOAD_LAST(xp + j);
        }
        if (tid == 0) {
            while (*reinterpret_cast<volatile unsigned*>(&arrived[r]) < (unsigned)G) __nanosleep(32);
            __threadfence();
        }
        __syncthreads();
        const float2 p = tid < G ? __ldcg(&parts[(long long)r * G + tid]) : make_float2(0.0f, 0.0f);
        const float2 t = block_sum2(p.x, p.y, red);
        const float ms = t.x * inv_n;  // mean - shift
        const float mean = __ldg(xr) + ms;
        const float rstd = rsqrtf(fmaxf(t.y * inv_n - ms * ms, 0.0f) + eps);  // biased variance
        // Row 0: this thread's weight slots have landed (the next row's prefetch may still be in flight).
        if (WEIGHT_SMEM && r == 0) {
            if (STAGED > 0 && rows > 1) cp_async_wait<1>();
            else cp_async_wait<0>();
        }
#pragma unroll
        for (int k0 = 0; k0 < ITEMS; k0 += UNROLL) {
            if (k0 > 0) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const int j = (k0 + u) * BLOCK + tid;
                    if (k0 + u < ITEMS && j < n4) v[u] = HOLD ? held[j] : LOAD_LAST(xp + j);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int k = k0 + u, j = k * BLOCK + tid;
                if (k < ITEMS && j < n4) {
                    const float4 g = WEIGHT_SMEM ? wsm[j] : load_hinted(wg + j, keep);
                    float4 o;
                    o.x = fmaf((v[u].x - mean) * rstd, g.x, bv[k].x);
                    o.y = fmaf((v[u].y - mean) * rstd, g.y, bv[k].y);
                    o.z = fmaf((v[u].z - mean) * rstd, g.z, bv[k].z);
                    o.w = fmaf((v[u].w - mean) * rstd, g.w, bv[k].w);
                    STORE_OUT(yp + j, o);
                }
            }
        }
    };

    for (int r = 0; r < (HOLD ? AHEAD : 0) && r < rows; ++r) prefetch(r);
    statistics(0, HOLD, AHEAD > 1 && rows > 1);
    for (int r = 0; r < rows; ++r) {
        if (STAGED > 0 && r + AHEAD < rows) prefetch(r + AHEAD);
        if (AHEAD > 1) {
            // The next row's statistics first: its arrivals are then a whole row's work ahead of their wait.
            if (r + 1 < rows) statistics(r + 1, true, r + 2 < rows);
            normalise(r);
        } else {
            normalise(r);
            if (r + 1 < rows) statistics(r + 1, STAGED > 0, false);
        }
    }
    // Every block is past its last wait: the last one here zeroes the counters for the next call on this stream.
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(&arrived[rows], 1u) == (unsigned)G - 1) {
            for (int r = 0; r <= rows; ++r) arrived[r] = 0;
        }
    }
}
""")

LAYERNORM_PERSISTENT_PY = r'''"""Builtin candidate `layernorm_cuda_persistent` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

A row is the trailing prod(normalized_shape) elements; y = (x - mean) / sqrt(var + eps) * weight + bias
with the biased variance, like nn.LayerNorm. Rows of up to (SMs x @PER_SM@ x @CHUNK@) elements, a multiple of 4.
"""

import math

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_THREADS, _PER_SM, _CHUNK, _SMEM = @BLOCK@, @PER_SM@, @CHUNK@, @SMEM@
EPS = @EPS@
# Cooperative launch: the driver refuses a grid that cannot be resident at once, so the grid-wide wait is safe.
_KERNEL = cupy.RawKernel(CUDA_SRC, "layernorm_persistent", options=("-std=c++17",), enable_cooperative_groups=True)
# Always: without it the dynamic and static shared memory together must stay within 48 KiB.
_KERNEL.max_dynamic_shared_size_bytes = _SMEM
@STREAM_PY@
_SCRATCH = {}


def _scratch(device: torch.device, rows: int, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The partial sums and the arrival counters for calls on this stream. The kernel leaves the counters
    zero, and calls on one stream run one after another, so they are zeroed once, when made."""
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    have = _SCRATCH.get(key)
    if have is None or have[1].numel() < rows + 1 or have[0].numel() < 2 * rows * grid:
        parts = torch.empty(2 * rows * grid, dtype=torch.float32, device=device)
        have = _SCRATCH[key] = (parts, torch.zeros(rows + 1, dtype=torch.int32, device=device))
    return have


@LAYERNORM_MODULE@

@LAYERNORM_FORWARD_PY@
        if x.data_ptr() % 16:
            x = x.clone()  # a fresh allocation is aligned; the kernel reads float4
        grid = _sm_count(x.device) * _PER_SM
        if cols % 4 or cols > grid * _CHUNK:
            raise ValueError(f"rows of {cols} elements: this kernel takes multiples of 4 up to {grid * _CHUNK}")
        parts, arrived = _scratch(x.device, rows, grid)
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), parts.data_ptr(), arrived.data_ptr())
        args = (*ptrs, cupy.int32(rows), cupy.int64(cols), cupy.float32(EPS))
        _run_kernel(_KERNEL, x.device, (grid,), (_THREADS,), args, shared_mem=_SMEM)
        return y
'''


def persistent_smem(params: dict[str, Any]) -> int:
    """Dynamic shared memory of one block: its weight chunk and the next row's staged slots, or with ``hold``
    that many chunks of x (and the weight's chunk only beside two)."""
    hold = params["hold"]
    weight = params["items"] if hold != 3 else 0  # three buffers leave the weight in L2
    return params["block"] * (weight + (hold * params["items"] if hold else params["stage"])) * 16


def render_layernorm_persistent(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        LAYERNORM_PERSISTENT_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        PER_SM=params["per_sm"],
        ITEMS=params["items"],
        UNROLL=params["unroll"],
        STAGE=params["stage"],
        HINTS=c_bool(params["hints"]),
        HOLD=params["hold"],
    )
    return fill(
        LAYERNORM_PERSISTENT_PY,
        LAYERNORM_MODULE=LAYERNORM_MODULE,
        LAYERNORM_FORWARD_PY=LAYERNORM_FORWARD_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BLOCK=params["block"],
        PER_SM=params["per_sm"],
        CHUNK=params["block"] * params["items"] * 4,
        SMEM=persistent_smem(params),
        EPS=repr(float(params.get("eps", 1e-5))),
    )
