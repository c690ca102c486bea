"""RMSNorm, and L1 / L2 normalisation, on CUDA (NVRTC through CuPy): ``rmsnorm_cuda_rows`` over contiguous
trailing dims (a group of ``tpr`` threads per row, the row held in registers when it fits, or split over blocks)
and ``rmsnorm_cuda_inner`` over a strided dim (threads across the inner dim, ``by`` down the normalised one)."""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_reduce_python import (
    formula,
    inner_constants,
    norm_code,
    params_text,
    rms_module,
    rows_constants,
    spec_of,
    weight_parts,
)

RMS_COMMON_CU = r"""
__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

__device__ __forceinline__ float4 scale4(float4 v, float s)
{
    v.x *= s;
    v.y *= s;
    v.z *= s;
    v.w *= s;
    return v;
}

__device__ __forceinline__ float4 mul4(float4 v, float4 w)
{
    v.x *= w.x;
    v.y *= w.y;
    v.z *= w.z;
    v.w *= w.w;
    return v;
}

// NORM: 0 RMSNorm, 1 L2, 2 L1 (sum of |x|), 3 mean of |x|. What each element adds to the row's sum s ...
__device__ __forceinline__ float term(float v) { return NORM >= 2 ? fabsf(v) : v * v; }

__device__ __forceinline__ float term4(float4 v) { return (term(v.x) + term(v.y)) + (term(v.z) + term(v.w)); }

// ... and the factor y = x * factor(s): 1 / the divisor torch's reference computes from s.
__device__ __forceinline__ float inv_norm(float s, long long n, float eps)
{
#if NORM == 0
    return 1.0f / sqrtf(s / (float)n + eps);  // x / sqrt(mean(x^2) + eps)
#elif NORM == 1
    return 1.0f / sqrtf(s);  // x / sqrt(sum(x^2))
#elif NORM == 2
    return 1.0f / s;  // x / sum(|x|)
#else
    return 1.0f / (s / (float)n);  // x / mean(|x|)
#endif
}
"""

RMS_ROWS_CU = c_params(r"""
// RMSNorm (or L1 / L2 normalisation, NORM) over a contiguous (last) run of dims: y = x * factor(row sum) [* weight].
@SUMMARY_C@
#param BLOCK      // threads per block
#param TPR          // threads per row (32..1024, a power of two): BLOCK / TPR rows per block
#param VEC          // float4 accesses when every row and the weight are 16-byte aligned
#param ITEMS        // float4s per thread kept in registers when the row fits (0: read it twice)
#param SPLIT        // blocks per row (> 1: TPR == BLOCK; partial sums, then a second kernel)
#param NORM         // the normalisation: 0 RMSNorm, 1 L2, 2 L1, 3 mean of |x|
#define RPB (BLOCK / TPR)
@COMMON@
static_assert(TPR >= 32 && (TPR & (TPR - 1)) == 0 && TPR <= BLOCK && BLOCK % TPR == 0, "TPR: a power of two");
static_assert(SPLIT == 1 || (TPR == BLOCK && ITEMS == 0), "a split row is one block per chunk, streamed");

// Sum over the row's TPR threads; every thread of the group gets the same total (same order everywhere).
__device__ __forceinline__ float group_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
#if TPR > 32
    __shared__ float warp_sum[BLOCK / 32];
    if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = v;
    __syncthreads();
    const int first = (threadIdx.x / TPR) * (TPR / 32);
    v = 0.0f;
#pragma unroll
    for (int k = 0; k < TPR / 32; ++k) v += warp_sum[first + k];
#endif
    return v;
}

__device__ __forceinline__ float stat_span(const float* xr, long long lo, long long hi, int t, bool vec)
{
    float s0 = 0.0f, s1 = 0.0f;  // two accumulators: two loads in flight per thread
    long long i = lo;
    if (vec) {
        const long long end = lo + (hi - lo) / 4 * 4;
        for (i = lo + 4LL * t; i + 4LL * TPR < end; i += 8LL * TPR) {
            s0 += term4(__ldg(reinterpret_cast<const float4*>(xr + i)));
            s1 += term4(__ldg(reinterpret_cast<const float4*>(xr + i + 4LL * TPR)));
        }
        if (i < end) s0 += term4(__ldg(reinterpret_cast<const float4*>(xr + i)));
        i = end;
    }
    for (long long k = i + t; k < hi; k += TPR) s1 += term(xr[k]);
    return s0 + s1;
}

__device__ __forceinline__ void scale_span(const float* xr, const float* w, float* yr, long long lo, long long hi,
                                           int t, bool vec, float inv)
{
    long long i = lo;
    if (vec) {
        const long long end = lo + (hi - lo) / 4 * 4;
        for (i = lo + 4LL * t; i < end; i += 4LL * TPR) {
            float4 v = scale4(__ldg(reinterpret_cast<const float4*>(xr + i)), inv);
            if (w) v = mul4(v, __ldg(reinterpret_cast<const float4*>(w + i)));
            *reinterpret_cast<float4*>(yr + i) = v;
        }
        i = end;
    }
    for (long long k = i + t; k < hi; k += TPR) yr[k] = w ? (xr[k] * inv) * w[k] : xr[k] * inv;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rms_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, long long rows,
         long long cols, float eps)
{
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    const bool active = row < rows;  // no early return: every thread takes part in group_sum
    const float* xr = x + (active ? row : 0) * cols;
    float* yr = y + (active ? row : 0) * cols;
    // The same for every row of the launch, so every thread of a block takes the same path.
    const bool vec = VEC && cols % 4 == 0 && aligned16(x) && aligned16(y) && (!w || aligned16(w));
#if ITEMS > 0
    if (vec && cols <= 4LL * TPR * ITEMS) {
        float4 r[ITEMS];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = 4LL * (k * TPR + t);
            r[k] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (active && i < cols) r[k] = __ldg(reinterpret_cast<const float4*>(xr + i));
            s += term4(r[k]);
        }
        const float inv = inv_norm(group_sum(s), cols, eps);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = 4LL * (k * TPR + t);
            if (active && i < cols) {
                float4 v = scale4(r[k], inv);
                if (w) v = mul4(v, __ldg(reinterpret_cast<const float4*>(w + i)));
                *reinterpret_cast<float4*>(yr + i) = v;
            }
        }
        return;
    }
#endif
    const float s = group_sum(active ? stat_span(xr, 0, cols, t, vec) : 0.0f);
    if (active) scale_span(xr, w, yr, 0, cols, t, vec, inv_norm(s, cols, eps));
}

// Split rows, kernel 1: block (row, j) sums the terms of chunk j of its row into part[row * SPLIT + j].
__device__ __forceinline__ long long chunk_len(long long cols) { return ((cols + SPLIT - 1) / SPLIT + 3) / 4 * 4; }

extern "C" __global__ void __launch_bounds__(BLOCK)
rms_partial(const float* __restrict__ x, float* __restrict__ part, long long cols)
{
    const long long row = blockIdx.x / SPLIT, j = blockIdx.x % SPLIT;
    const long long chunk = chunk_len(cols), lo = min(cols, j * chunk), hi = min(cols, lo + chunk);
    const bool vec = VEC && cols % 4 == 0 && aligned16(x);
    const float s = group_sum(stat_span(x + row * cols, lo, hi, threadIdx.x, vec));
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// Split rows, kernel 2: block (row, j) adds its row's partials (in order) and scales chunk j.
extern "C" __global__ void __launch_bounds__(BLOCK)
rms_apply(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ part,
          float* __restrict__ y, long long cols, float eps)
{
    const long long row = blockIdx.x / SPLIT, j = blockIdx.x % SPLIT;
    float s = 0.0f;
    for (int k = 0; k < SPLIT; ++k) s += part[row * SPLIT + k];
    const long long chunk = chunk_len(cols), lo = min(cols, j * chunk), hi = min(cols, lo + chunk);
    const bool vec = VEC && cols % 4 == 0 && aligned16(x) && aligned16(y) && (!w || aligned16(w));
    scale_span(x + row * cols, w, y + row * cols, lo, hi, threadIdx.x, vec, inv_norm(s, cols, eps));
}
""")

RMS_INNER_CU = c_params(r"""
// RMSNorm (or L1 / L2 normalisation, NORM) over a strided dim (e.g. dim 1 of (batch, features, h, w)): BX threads
// across the inner dim
// (V adjacent columns each, coalesced), BY threads down the normalised dim per column.
@SUMMARY_C@
#param BX           // threads across the inner dim
#param BY            // threads down the normalised dim, sums merged through shared memory
#param ITEMS        // values per thread and column kept in registers when the dim fits (0: read twice)
#param NORM         // the normalisation: 0 RMSNorm, 1 L2, 2 L1, 3 mean of |x|
@COMMON@
static_assert(BX * BY <= 1024 && (BX * BY) % 32 == 0, "a whole number of warps, at most 1024 threads");

template <int V>
__device__ __forceinline__ void load(const float* p, float (&v)[V])
{
    if constexpr (V == 4) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
    } else {
        v[0] = __ldg(p);
    }
}

template <int V>
__device__ __forceinline__ void store(float* p, const float (&v)[V], const float (&inv)[V])
{
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0] * inv[0], v[1] * inv[1], v[2] * inv[2], v[3] * inv[3]);
    } else {
        p[0] = v[0] * inv[0];
    }
}

template <int V>
__device__ __forceinline__ void rms_inner_body(const float* __restrict__ x, float* __restrict__ y, long long red,
                                               long long inner, float eps)
{
    const int tx = threadIdx.x % BX, ty = threadIdx.x / BX;
    const long long tiles = (inner + BX * V - 1) / (BX * V);
    const long long o = blockIdx.x / tiles;
    const long long c = (blockIdx.x % tiles) * (BX * V) + (long long)tx * V;
    const bool active = c < inner;  // no early return: every thread reaches the barrier below
    const long long base = o * red * inner + (active ? c : 0);
    const float* xo = x + base;
    float* yo = y + base;
    float s[V];
#pragma unroll
    for (int k = 0; k < V; ++k) s[k] = 0.0f;
#if ITEMS > 0
    float r[ITEMS][V];
    const bool fits = red <= (long long)BY * ITEMS;  // the same for the whole launch
    if (fits) {
#pragma unroll
        for (int q = 0; q < ITEMS; ++q) {
            const long long rr = ty + (long long)q * BY;
            if (active && rr < red) {
                load<V>(xo + rr * inner, r[q]);
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) r[q][k] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] += term(r[q][k]);
        }
    } else
#endif
    if (active) {
#pragma unroll 4
        for (long long rr = ty; rr < red; rr += BY) {
            float v[V];
            load<V>(xo + rr * inner, v);
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] += term(v[k]);
        }
    }
#if BY > 1
    __shared__ float part[BY][BX * 4];
#pragma unroll
    for (int k = 0; k < V; ++k) part[ty][tx * V + k] = s[k];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < V; ++k) {
        float t = 0.0f;
        for (int q = 0; q < BY; ++q) t += part[q][tx * V + k];  // the same order in every thread of the column
        s[k] = t;
    }
#endif
    if (!active) return;
    float inv[V];
#pragma unroll
    for (int k = 0; k < V; ++k) inv[k] = inv_norm(s[k], red, eps);
#if ITEMS > 0
    if (fits) {
#pragma unroll
        for (int q = 0; q < ITEMS; ++q) {
            const long long rr = ty + (long long)q * BY;
            if (rr < red) store<V>(yo + rr * inner, r[q], inv);
        }
        return;
    }
#endif
    for (long long rr = ty; rr < red; rr += BY) {
        float v[V];
        load<V>(xo + rr * inner, v);
        store<V>(yo + rr * inner, v, inv);
    }
}

extern "C" __global__ void __launch_bounds__(BX * BY)
rms_inner_v4(const float* __restrict__ x, float* __restrict__ y, long long red, long long inner, float eps)
{
    rms_inner_body<4>(x, y, red, inner, eps);
}

extern "C" __global__ void __launch_bounds__(BX * BY)
rms_inner_v1(const float* __restrict__ x, float* __restrict__ y, long long red, long long inner, float eps)
{
    rms_inner_body<1>(x, y, red, inner, eps);
}
""")


RMS_CUDA_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@FORMULA@@TIMES_WEIGHT@, on float32 CUDA tensors.
"""

import functools

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
KEEPDIM = True
@CONSTANTS@
@MODULE@
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        outer, red, inner, _ = _layout(tuple(x.shape))
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        @LAUNCH@
        return y
'''

_LAUNCH_RMS_ROWS = """if inner != 1:
            raise ValueError(f"this kernel normalises contiguous dims; {tuple(x.shape)} has {inner} after them")
        wp = @WEIGHT_PTR@
        if _SPLIT == 1:
            kernel = _function("rms_rows")
            grid = ((outer + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK,)
            args = (x.data_ptr(), wp, y.data_ptr(), cupy.int64(outer), cupy.int64(red), cupy.float32(EPS))
            _run_kernel(kernel, x.device, grid, (_BLOCK,), args)
        else:
            part = torch.empty(outer * _SPLIT, dtype=torch.float32, device=x.device)
            partial = _function("rms_partial")
            apply = _function("rms_apply")
            args = (x.data_ptr(), part.data_ptr(), cupy.int64(red))
            _run_kernel(partial, x.device, (outer * _SPLIT,), (_BLOCK,), args)
            args = (x.data_ptr(), wp, part.data_ptr(), y.data_ptr(), cupy.int64(red), cupy.float32(EPS))
            _run_kernel(apply, x.device, (outer * _SPLIT,), (_BLOCK,), args)"""

_LAUNCH_RMS_INNER = """v = 4 if _VEC and inner % 4 == 0 and x.data_ptr() % 16 == 0 else 1
        kernel = _function("rms_inner_v4" if v == 4 else "rms_inner_v1")
        grid = (outer * ((inner + _BX * v - 1) // (_BX * v)),)
        args = (x.data_ptr(), y.data_ptr(), cupy.int64(red), cupy.int64(inner), cupy.float32(EPS))
        _run_kernel(kernel, x.device, grid, (_BX * _BY,), args)"""


def _rms_cuda_py(template: str, params: dict[str, Any], summary: str, cu: str, constants: str, launch: str) -> str:
    _, weight, times = weight_parts(params)
    # The rows kernel takes the weight's pointer (0: none); the strided template is only used without a weight.
    launch = fill(launch, WEIGHT_PTR="0  # no weight" if weight == "None" else f"{weight}.data_ptr()")
    return fill(
        RMS_CUDA_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        FORMULA=formula(params),
        TIMES_WEIGHT=times,
        CUDA_SRC=cu,
        CONSTANTS=constants,
        MODULE=rms_module(params),
        LAUNCH=launch,
    )


def render_rms_rows(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        RMS_ROWS_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        TPR=params["tpr"],
        VEC=c_bool(params["vec4"]),
        ITEMS=params["items"],
        SPLIT=params["split"],
        NORM=norm_code(params),
        COMMON=RMS_COMMON_CU,
    )
    return _rms_cuda_py("rmsnorm_cuda_rows", params, summary, cu, rows_constants(params), _LAUNCH_RMS_ROWS)


def render_rms_inner(params: dict[str, Any], summary: str) -> str:
    if spec_of(params).get("weight"):
        raise ValueError("rmsnorm_cuda_inner normalises without a weight")
    cu = fill(
        RMS_INNER_CU,
        SUMMARY_C=wrap(summary, "// "),
        BX=params["bx"],
        BY=params["by"],
        ITEMS=params["items"],
        NORM=norm_code(params),
        COMMON=RMS_COMMON_CU,
    )
    return _rms_cuda_py(
        "rmsnorm_cuda_inner", params, summary, cu, inner_constants(params, split=False), _LAUNCH_RMS_INNER
    )
