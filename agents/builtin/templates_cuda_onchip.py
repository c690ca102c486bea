"""CUDA templates that keep whole rows on chip: each row is read from memory once and written once.

- ``softmax_cuda_cluster``: a row is split over a thread-block cluster (sm_90); each block holds its chunk in
  registers, and the blocks merge their (max, sum) pairs through distributed shared memory.
- ``layernorm_cuda_persistent``: for a few very long rows. A persistent, cooperatively launched grid holds one
  row at a time across all SMs (or two: one in registers, one in shared memory); the blocks merge their
  statistics through a per-row arrival counter in global memory. ``staging``: "none"; "next_row" stages the
  next row in shared memory (cp.async) while the grid waits; "pair" normalises two rows per pass, so the
  weight and bias are read once per pair and the grid waits half as often.

Both render complete candidate files; the kernel source is one raw string literal whose ``#ifndef`` defaults
are the chosen parameters, like ``templates_cuda``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, wrap
from agents.builtin.candidate_python import SOFTMAX_ROWS_PY

SOFTMAX_CLUSTER_CU = c_params(r"""
// Row softmax with each row split over a thread-block cluster; the row stays in registers
// (one read, one write).
@SUMMARY_C@
#param CLUSTER
#param BLOCK
#param ITEMS        // float4 per thread
#param LOG
#param STREAM       // evict-first loads and stores (__ldcs / __stcs): the row is touched once
#if STREAM
#define LD(p) __ldcs(p)
#define ST(p, v) __stcs(p, v)
#else
#define LD(p) (*(p))
#define ST(p, v) (*(p) = (v))
#endif
#define WARPS (BLOCK / 32)
#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_barrier()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ float2 load_remote(const float2* local, unsigned rank)
{
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    if (m2 == NEG_INF) return;
    const float mx = fmaxf(m, m2);
    s = s * exp2f((m - mx) * LOG2E) + s2 * exp2f((m2 - mx) * LOG2E);
    m = mx;
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(BLOCK)
softmax_cluster(const float* __restrict__ x, float* __restrict__ y, long long cols)
{
    __shared__ float red[WARPS];
    __shared__ float2 pair;  // this block's (max, sum), read by the whole cluster
    const unsigned rank = cluster_rank();
    const long long row = blockIdx.x / CLUSTER;
    // Each block owns a contiguous, float4-aligned chunk of the row.
    const long long chunk = ((cols + CLUSTER - 1) / CLUSTER + 3) / 4 * 4;
    const long long begin = rank * chunk;
    const long long end = min(cols, begin + chunk);
    const float* xr = x + row * cols;
    float* yr = y + row * cols;

    float4 v[ITEMS];
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
        if (i + 3 < end) {
            v[k] = LD(reinterpret_cast<const float4*>(xr + i));
        } else {
            v[k].x = i < end ? xr[i] : NEG_INF;
            v[k].y = i + 1 < end ? xr[i + 1] : NEG_INF;
            v[k].z = i + 2 < end ? xr[i + 2] : NEG_INF;
            v[k].w = i + 3 < end ? xr[i + 3] : NEG_INF;
        }
        m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
    }
    // Block max.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
    __syncthreads();
    m = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) m = fmaxf(m, red[w]);
    float s = 0.0f;
    const float mb = m == NEG_INF ? 0.0f : m * LOG2E;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
#if LOG
        // log-softmax keeps x in registers (log of a stored exp would lose the far tail) and sums exps.
        s += (exp2f(fmaf(v[k].x, LOG2E, -mb)) + exp2f(fmaf(v[k].y, LOG2E, -mb))) +
             (exp2f(fmaf(v[k].z, LOG2E, -mb)) + exp2f(fmaf(v[k].w, LOG2E, -mb)));
#else
        // exp(x - block max) replaces x in registers: one exp per element.
        v[k].x = exp2f(fmaf(v[k].x, LOG2E, -mb));
        v[k].y = exp2f(fmaf(v[k].y, LOG2E, -mb));
        v[k].z = exp2f(fmaf(v[k].z, LOG2E, -mb));
        v[k].w = exp2f(fmaf(v[k].w, LOG2E, -mb));
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
#endif
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    __syncthreads();  // red[] is reused
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < WARPS; ++w) t += red[w];
        pair = make_float2(m, t);
    }
    cluster_barrier();
    // Every thread merges the cluster's pairs (CLUSTER distributed-shared-memory reads).
    float M = NEG_INF, S = 0.0f;
#pragma unroll
    for (unsigned r = 0; r < CLUSTER; ++r) {
        const float2 p = load_remote(&pair, r);
        merge(M, S, p.x, p.y);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#if LOG
    const float shift = -M - logf(S);
#else
    const float scale = (m == NEG_INF ? 0.0f : exp2f((m - M) * LOG2E)) / S;
#endif
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
        float4 o;
#if LOG
        o.x = v[k].x + shift; o.y = v[k].y + shift; o.z = v[k].z + shift; o.w = v[k].w + shift;
#else
        o.x = v[k].x * scale; o.y = v[k].y * scale; o.z = v[k].z * scale; o.w = v[k].w * scale;
#endif
        if (i + 3 < end) {
            ST(reinterpret_cast<float4*>(yr + i), o);
        } else {
            if (i < end) yr[i] = o.x;
            if (i + 1 < end) yr[i + 1] = o.y;
            if (i + 2 < end) yr[i + 2] = o.z;
        }
    }
    // No block may leave while another may still read its pair: arrive once the pairs are read, wait at the end.
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
""")

SOFTMAX_CLUSTER_PY = (
    r'''"""Builtin candidate `softmax_cuda_cluster` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@WHAT@ over the last dim, rows of up to @CAPACITY@ elements (a multiple of 4); needs an sm_90 GPU (clusters).
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_CLUSTER, _THREADS, _CAPACITY = @CLUSTER@, @BLOCK@, @CAPACITY@
_KERNEL = cupy.RawKernel(CUDA_SRC, "softmax_cluster", options=("-std=c++17", "-arch=sm_90a"))
@STREAM_PY@


'''
    + SOFTMAX_ROWS_PY
    + r"""
        if cols % 4 or cols > _CAPACITY:
            raise ValueError(f"rows of {cols} elements: this kernel takes multiples of 4 up to {_CAPACITY}")
        args = (x.data_ptr(), out.data_ptr(), cupy.int64(cols))
        _run_kernel(_KERNEL, x.device, (rows * _CLUSTER,), (_THREADS,), args)
        return out
"""
)

LAYERNORM_PERSISTENT_CU = c_params(r"""
// LayerNorm for a few very long rows: a persistent grid (one block per SM, cooperative launch) holds
// one whole
// row on chip at a time, each block a contiguous chunk in registers. Per row: block statistics, one grid-wide
// merge through a per-row arrival counter, then normalise from registers: x is read once and y written once.
@SUMMARY_C@
#param BLOCK
#param ITEMS        // float4 per thread
#param PREFETCH     // stage the next row's chunk in shared memory (cp.async) while this row is merged
#param PER_SM       // blocks per SM the register budget is set for
#define WARPS (BLOCK / 32)

struct Part {
    float n, mean, m2;
};

// Chan et al.: merge (nb, mb, m2b) into (n, mean, m2).
__device__ __forceinline__ void chan(float& n, float& mean, float& m2, float nb, float mb, float m2b)
{
    if (nb == 0.0f) return;
    const float nn = n + nb;
    const float d = mb - mean;
    mean += d * (nb / nn);
    m2 += m2b + d * d * (n * nb / nn);
    n = nn;
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) t += red[w];
    return t;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

extern "C" __global__ void __launch_bounds__(BLOCK, PER_SM)
layernorm_persistent(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                     float* __restrict__ y, Part* __restrict__ parts, unsigned* __restrict__ arrived, int rows,
                     long long cols, float eps)
{
    __shared__ float red[WARPS];
    __shared__ float stats[2];
#if PREFETCH
    extern __shared__ float4 stage[];  // ITEMS * BLOCK float4: the next row's chunk
#endif
    const int G = gridDim.x;
    const long long chunk = ((cols + G - 1) / G + 3) / 4 * 4;
    const long long begin = blockIdx.x * chunk;
    const long long end = min(cols, begin + chunk);

    float4 v[ITEMS];
    auto load_row = [&](int r) {
        const float* xr = x + (long long)r * cols;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            v[k] = i < end ? __ldcs(reinterpret_cast<const float4*>(xr + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
#if PREFETCH
    auto stage_row = [&](int r) {
        const float* xr = x + (long long)r * cols;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (i < end) cp_async16(&stage[k * BLOCK + threadIdx.x], xr + i);
        }
        cp_async_commit();
    };
#endif
    load_row(0);
    for (int r = 0; r < rows; ++r) {
        // Block statistics, two passes over registers (exact, no cancellation).
        const float nb = (float)max(0LL, end - begin);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        s = block_sum(s, red);
        const float mb = nb > 0.0f ? s / nb : 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (i < end) {
                const float a = v[k].x - mb, c = v[k].y - mb, d = v[k].z - mb, e = v[k].w - mb;
                q += (a * a + c * c) + (d * d + e * e);
            }
        }
        q = block_sum(q, red);
        if (threadIdx.x == 0) {
            parts[(long long)r * G + blockIdx.x] = Part{nb, mb, q};
            __threadfence();
            atomicAdd(&arrived[r], 1u);
        }
#if PREFETCH
        if (r + 1 < rows) stage_row(r + 1);  // DRAM keeps streaming while the grid waits for this row
#endif
        // Wait for every block's part of this row, then merge them all (warp 0; lanes stride the parts).
        if (threadIdx.x < 32) {
            if (threadIdx.x == 0) {
                while (*reinterpret_cast<volatile unsigned*>(&arrived[r]) < (unsigned)G) __nanosleep(32);
            }
            __syncwarp();
            __threadfence();
            float n = 0.0f, mean = 0.0f, m2 = 0.0f;
            for (int g = threadIdx.x; g < G; g += 32) {
                const Part* p = &parts[(long long)r * G + g];  // written by other blocks: read through L2
                chan(n, mean, m2, __ldcg(&p->n), __ldcg(&p->mean), __ldcg(&p->m2));
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                const float n2 = __shfl_xor_sync(0xffffffffu, n, off);
                const float mean2 = __shfl_xor_sync(0xffffffffu, mean, off);
                const float m22 = __shfl_xor_sync(0xffffffffu, m2, off);
                chan(n, mean, m2, n2, mean2, m22);
            }
            if (threadIdx.x == 0) {
                stats[0] = mean;
                stats[1] = rsqrtf(m2 / n + eps);
            }
        }
        __syncthreads();
        const float mean = stats[0], rstd = stats[1];
        float* yr = y + (long long)r * cols;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (i < end) {
                const float4 wv = __ldg(reinterpret_cast<const float4*>(w + i));
                const float4 bv = __ldg(reinterpret_cast<const float4*>(b + i));
                float4 o;
                o.x = fmaf((v[k].x - mean) * rstd, wv.x, bv.x);
                o.y = fmaf((v[k].y - mean) * rstd, wv.y, bv.y);
                o.z = fmaf((v[k].z - mean) * rstd, wv.z, bv.z);
                o.w = fmaf((v[k].w - mean) * rstd, wv.w, bv.w);
                __stcs(reinterpret_cast<float4*>(yr + i), o);
            }
        }
        if (r + 1 < rows) {
#if PREFETCH
            cp_async_wait_all();
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {  // own slots only: no block barrier needed
                const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
                v[k] = i < end ? stage[k * BLOCK + threadIdx.x] : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#else
            load_row(r + 1);
#endif
        }
    }
}

// Two rows per pass: row A in registers, row B staged in shared memory (cp.async). The weight and bias are read
// once per pair instead of once per row, and the grid waits once per pair.
extern "C" __global__ void __launch_bounds__(BLOCK, PER_SM)
layernorm_persistent2(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                      float* __restrict__ y, Part* __restrict__ parts, unsigned* __restrict__ arrived, int rows,
                      long long cols, float eps)
{
    __shared__ float red[WARPS];
    __shared__ float stats[4];
    extern __shared__ float4 stage[];  // ITEMS * BLOCK float4: row B's chunk
    const int G = gridDim.x;
    const long long chunk = ((cols + G - 1) / G + 3) / 4 * 4;
    const long long begin = blockIdx.x * chunk;
    const long long end = min(cols, begin + chunk);
    const float nb = (float)max(0LL, end - begin);

    for (int r = 0; r < rows; r += 2) {
        const bool two = r + 1 < rows;
        const float* xa = x + (long long)r * cols;
        const float* xb = xa + cols;
        float4 v[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (two && i < end) cp_async16(&stage[k * BLOCK + threadIdx.x], xb + i);
        }
        cp_async_commit();
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            v[k] = i < end ? __ldcs(reinterpret_cast<const float4*>(xa + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        // Row A statistics from registers.
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        s = block_sum(s, red);
        const float ma = nb > 0.0f ? s / nb : 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (i < end) {
                const float a = v[k].x - ma, c = v[k].y - ma, d = v[k].z - ma, e = v[k].w - ma;
                q += (a * a + c * c) + (d * d + e * e);
            }
        }
        q = block_sum(q, red);
        if (threadIdx.x == 0) parts[(long long)r * G + blockIdx.x] = Part{nb, ma, q};
        // Row B statistics from shared memory (each thread reads only the slots it staged).
        cp_async_wait_all();
        float mbb = 0.0f;
        if (two) {
            s = 0.0f;
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
                if (i < end) {
                    const float4 u = stage[k * BLOCK + threadIdx.x];
                    s += (u.x + u.y) + (u.z + u.w);
                }
            }
            s = block_sum(s, red);
            mbb = nb > 0.0f ? s / nb : 0.0f;
            q = 0.0f;
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
                if (i < end) {
                    const float4 u = stage[k * BLOCK + threadIdx.x];
                    const float a = u.x - mbb, c = u.y - mbb, d = u.z - mbb, e = u.w - mbb;
                    q += (a * a + c * c) + (d * d + e * e);
                }
            }
            q = block_sum(q, red);
            if (threadIdx.x == 0) parts[(long long)(r + 1) * G + blockIdx.x] = Part{nb, mbb, q};
        }
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(&arrived[r / 2], 1u);
        }
        // Warps 0 and 1 merge rows A and B.
        if (threadIdx.x < 64 && (threadIdx.x < 32 || two)) {
            const int rr = r + threadIdx.x / 32, lane = threadIdx.x % 32;
            if (lane == 0) {
                while (*reinterpret_cast<volatile unsigned*>(&arrived[r / 2]) < (unsigned)G) __nanosleep(32);
            }
            __syncwarp();
            __threadfence();
            float n = 0.0f, mean = 0.0f, m2 = 0.0f;
            for (int g = lane; g < G; g += 32) {
                const Part* p = &parts[(long long)rr * G + g];
                chan(n, mean, m2, __ldcg(&p->n), __ldcg(&p->mean), __ldcg(&p->m2));
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                const float n2 = __shfl_xor_sync(0xffffffffu, n, off);
                const float mean2 = __shfl_xor_sync(0xffffffffu, mean, off);
                const float m22 = __shfl_xor_sync(0xffffffffu, m2, off);
                chan(n, mean, m2, n2, mean2, m22);
            }
            if (lane == 0) {
                stats[2 * (threadIdx.x / 32)] = mean;
                stats[2 * (threadIdx.x / 32) + 1] = rsqrtf(m2 / n + eps);
            }
        }
        __syncthreads();
        const float mean_a = stats[0], rstd_a = stats[1], mean_b = stats[2], rstd_b = stats[3];
        float* ya = y + (long long)r * cols;
        float* yb = ya + cols;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = begin + ((long long)k * BLOCK + threadIdx.x) * 4;
            if (i < end) {
                const float4 wv = __ldg(reinterpret_cast<const float4*>(w + i));
                const float4 bv = __ldg(reinterpret_cast<const float4*>(b + i));
                float4 o;
                o.x = fmaf((v[k].x - mean_a) * rstd_a, wv.x, bv.x);
                o.y = fmaf((v[k].y - mean_a) * rstd_a, wv.y, bv.y);
                o.z = fmaf((v[k].z - mean_a) * rstd_a, wv.z, bv.z);
                o.w = fmaf((v[k].w - mean_a) * rstd_a, wv.w, bv.w);
                __stcs(reinterpret_cast<float4*>(ya + i), o);
                if (two) {
                    const float4 u = stage[k * BLOCK + threadIdx.x];
                    o.x = fmaf((u.x - mean_b) * rstd_b, wv.x, bv.x);
                    o.y = fmaf((u.y - mean_b) * rstd_b, wv.y, bv.y);
                    o.z = fmaf((u.z - mean_b) * rstd_b, wv.z, bv.z);
                    o.w = fmaf((u.w - mean_b) * rstd_b, wv.w, bv.w);
                    __stcs(reinterpret_cast<float4*>(yb + i), o);
                }
            }
        }
        __syncthreads();  // stats[] and the stage are reused by the next pair
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

_THREADS, _PER_SM, _CHUNK, _STAGE_BYTES = @BLOCK@, @PER_SM@, @CHUNK@, @STAGE_BYTES@
EPS = @EPS@
# Cooperative launch: the driver refuses a grid that cannot be resident at once, so the grid-wide wait is safe.
_KERNEL = cupy.RawKernel(CUDA_SRC, "@KERNEL@", options=("-std=c++17",), enable_cooperative_groups=True)
@STREAM_PY@
if _STAGE_BYTES > 48 * 1024:
    _KERNEL.max_dynamic_shared_size_bytes = _STAGE_BYTES


@LAYERNORM_MODULE@

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k :]) != self.normalized_shape:
            raise ValueError(f"input {tuple(x.shape)} does not end in {self.normalized_shape}")
        x = x.contiguous()
        weight, bias = self.ln.weight.detach().contiguous(), self.ln.bias.detach().contiguous()
        y = torch.empty_like(x)
        cols = math.prod(self.normalized_shape)
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return y
        grid = _sm_count(x.device) * _PER_SM
        if cols % 4 or cols > grid * _CHUNK:
            raise ValueError(f"rows of {cols} elements: this kernel takes multiples of 4 up to {grid * _CHUNK}")
        parts = torch.empty(3 * rows * grid, dtype=torch.float32, device=x.device)
        arrived = torch.zeros(rows, dtype=torch.int32, device=x.device)
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), parts.data_ptr(), arrived.data_ptr())
        args = (*ptrs, cupy.int32(rows), cupy.int64(cols), cupy.float32(EPS))
        _run_kernel(_KERNEL, x.device, (grid,), (_THREADS,), args, shared_mem=_STAGE_BYTES)
        return y
'''


def softmax_capacity(params: dict[str, Any]) -> int:
    """The longest row (elements) one cluster holds."""
    return params["cluster"] * params["block"] * params["items"] * 4


def render_softmax_cluster(params: dict[str, Any], summary: str) -> str:
    log = params.get("op") == "log_softmax"
    cu = fill(
        SOFTMAX_CLUSTER_CU,
        SUMMARY_C=wrap(summary, "// "),
        CLUSTER=params["cluster"],
        BLOCK=params["block"],
        ITEMS=params["items"],
        LOG=c_bool(log),
        STREAM=c_bool(params["stream"]),
    )
    return fill(
        SOFTMAX_CLUSTER_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        WHAT="log_softmax" if log else "softmax",
        CAPACITY=softmax_capacity(params),
        CUDA_SRC=cu,
        CLUSTER=params["cluster"],
        BLOCK=params["block"],
    )


def render_layernorm_persistent(params: dict[str, Any], summary: str) -> str:
    block, items = params["block"], params["items"]
    staging = params["staging"]
    cu = fill(
        LAYERNORM_PERSISTENT_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=block,
        ITEMS=items,
        PREFETCH=c_bool(staging == "next_row"),
        PER_SM=params["per_sm"],
    )
    return fill(
        LAYERNORM_PERSISTENT_PY,
        LAYERNORM_MODULE=LAYERNORM_MODULE,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BLOCK=block,
        PER_SM=params["per_sm"],
        CHUNK=block * items * 4,
        STAGE_BYTES=block * items * 16 if staging != "none" else 0,
        KERNEL="layernorm_persistent2" if staging == "pair" else "layernorm_persistent",
        EPS=repr(float(params.get("eps", 1e-5))),
    )
