"""``softmax_cuda_cluster``: row softmax that keeps whole rows on chip, each row read from memory once and
written once.

A row is split over a thread-block cluster (sm_90); each block holds its chunk in registers, and the blocks
merge their (max, sum) pairs through distributed shared memory. It renders a complete candidate file; the kernel
source is one raw string literal whose ``#ifndef`` defaults are the chosen parameters, like ``templates_cuda``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, wrap
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
