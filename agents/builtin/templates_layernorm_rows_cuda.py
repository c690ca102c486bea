"""LayerNorm on the GPU by rows: ``layernorm_cuda_block`` (a block per row, Welford statistics) and
``layernorm_cuda_split`` (a long row split across blocks). ``LAYERNORM_COMMON`` (the Welford helpers) and
``layernorm_candidate`` (the candidate file around a kernel) serve ``templates_layernorm_cuda`` too.

The kernel source is one plain raw string literal whose ``#ifndef`` defaults are the chosen parameters, so the
harness's NVRTC pre-check compiles exactly the kernel that runs, and the literal is valid CUDA on its own. The
candidate compiles it through CuPy's ``RawModule`` at import and launches it on torch's current stream.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, wrap
from agents.builtin.candidate_python import LAYERNORM_FORWARD_PY

LAYERNORM_COMMON = r"""
#define WARPS (BLOCK / 32)

struct Welford { float n, mean, m2; };  // count, mean, sum of squared deviations

__device__ __forceinline__ void welford_add(Welford& w, float x)
{
    w.n += 1.0f;
    const float d = x - w.mean;
    w.mean += d / w.n;
    w.m2 += d * (x - w.mean);
}

__device__ __forceinline__ void welford_merge(Welford& a, const Welford& b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) return;
    const float d = b.mean - a.mean;
    const float fb = b.n / n;
    a.mean += d * fb;
    a.m2 += b.m2 + d * d * a.n * fb;
    a.n = n;
}

__device__ __forceinline__ void welford_warp(Welford& w)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        Welford o;
        o.n = __shfl_xor_sync(0xffffffffu, w.n, off);
        o.mean = __shfl_xor_sync(0xffffffffu, w.mean, off);
        o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, off);
        welford_merge(w, o);
    }
}

// Block-wide Welford merge; every thread gets the block's statistics. `part` holds WARPS entries.
__device__ __forceinline__ Welford welford_block(Welford w, Welford* part)
{
    welford_warp(w);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) part[warp] = w;
    __syncthreads();
    w = lane < WARPS ? part[lane] : Welford{0.0f, 0.0f, 0.0f};
    welford_warp(w);
    __syncthreads();  // `part` may be reused afterwards
    return w;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Block-wide sum; every thread gets it. `part` holds WARPS floats.
__device__ __forceinline__ float block_sum(float v, float* part)
{
    v = warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = warp_sum(lane < WARPS ? part[lane] : 0.0f);
    __syncthreads();
    return v;
}

__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// Welford over x[lo:hi) by this block's threads (float4 when `vec`: x + lo 16-byte aligned, lo % 4 == 0).
__device__ __forceinline__ Welford welford_span(const float* x, long long lo, long long hi, bool vec)
{
    Welford w = {0.0f, 0.0f, 0.0f};
    const long long head = vec ? lo + (hi - lo) / 4 * 4 : lo;
    for (long long i = lo + threadIdx.x * 4LL; i < head; i += BLOCK * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        welford_add(w, v.x);
        welford_add(w, v.y);
        welford_add(w, v.z);
        welford_add(w, v.w);
    }
    for (long long i = head + threadIdx.x; i < hi; i += BLOCK) welford_add(w, x[i]);
    return w;
}

// y[lo:hi) = (x - mean) * rstd * weight + bias, indices relative to the row.
__device__ __forceinline__ void normalise_span(const float* xr, const float* weight, const float* bias, float* yr,
                                               long long lo, long long hi, float mean, float rstd, bool vec)
{
    const long long head = vec ? lo + (hi - lo) / 4 * 4 : lo;
    for (long long i = lo + threadIdx.x * 4LL; i < head; i += BLOCK * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        const float4 g = *reinterpret_cast<const float4*>(weight + i);
        const float4 b = *reinterpret_cast<const float4*>(bias + i);
        float4 r;
        r.x = (v.x - mean) * rstd * g.x + b.x;
        r.y = (v.y - mean) * rstd * g.y + b.y;
        r.z = (v.z - mean) * rstd * g.z + b.z;
        r.w = (v.w - mean) * rstd * g.w + b.w;
        *reinterpret_cast<float4*>(yr + i) = r;
    }
    for (long long i = head + threadIdx.x; i < hi; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * weight[i] + bias[i];
}
"""

LAYERNORM_BLOCK_CU = c_params(r"""
// LayerNorm, one block per row.
@SUMMARY_C@
#param BLOCK      // threads per block (a multiple of 32, at most 1024)
#param VEC          // float4 loads and stores when every pointer is 16-byte aligned
#param WELFORD      // 1: Welford in one read; 0: mean pass, then a pass for the squared deviations
@COMMON@
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
               float* __restrict__ y, long long cols, float eps)
{
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    const bool vec = VEC && aligned16(xr) && aligned16(yr) && aligned16(weight) && aligned16(bias);
#if WELFORD
    __shared__ Welford part[WARPS];
    const Welford w = welford_block(welford_span(xr, 0, cols, vec), part);
    const float mean = w.mean, rstd = rsqrtf(w.m2 / (float)cols + eps);  // biased variance, as nn.LayerNorm
#else
    __shared__ float part[WARPS];
    const long long head = vec ? cols / 4 * 4 : 0;
    float t = 0.0f;
    for (long long i = threadIdx.x * 4LL; i < head; i += BLOCK * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        t += (v.x + v.y) + (v.z + v.w);
    }
    for (long long i = head + threadIdx.x; i < cols; i += BLOCK) t += xr[i];
    const float mean = block_sum(t, part) / (float)cols;
    t = 0.0f;
    for (long long i = threadIdx.x * 4LL; i < head; i += BLOCK * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
        t += (a * a + b * b) + (c * c + d * d);
    }
    for (long long i = head + threadIdx.x; i < cols; i += BLOCK) t += (xr[i] - mean) * (xr[i] - mean);
    const float rstd = rsqrtf(block_sum(t, part) / (float)cols + eps);
#endif
    normalise_span(xr, weight, bias, yr, 0, cols, mean, rstd, vec);
}
""")

LAYERNORM_SPLIT_CU = c_params(r"""
// LayerNorm, several blocks per row.
@SUMMARY_C@
// Kernel 1: block (row, j) computes Welford statistics of chunk j of its row into `part`.
// Kernel 2: block (row, j) merges its row's SPLIT partials, then normalises chunk j.
#param BLOCK      // threads per block (a multiple of 32, at most 1024)
#param VEC          // float4 loads and stores when every pointer is 16-byte aligned
#param SPLIT        // blocks per row
@COMMON@
// Chunks are multiples of 4 elements so that float4 accesses inside a chunk stay aligned.
__device__ __forceinline__ long long chunk_len(long long cols) { return ((cols + SPLIT - 1) / SPLIT + 3) / 4 * 4; }

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_partial(const float* __restrict__ x, float* __restrict__ part, long long cols)
{
    const long long row = blockIdx.x / SPLIT;
    const int j = blockIdx.x % SPLIT;
    const long long chunk = chunk_len(cols);
    const long long lo = min(cols, j * chunk), hi = min(cols, lo + chunk);
    const float* xr = x + row * cols;
    const bool vec = VEC && aligned16(xr);
    __shared__ Welford warps[WARPS];
    const Welford w = welford_block(welford_span(xr, lo, hi, vec), warps);
    if (threadIdx.x == 0) {
        float* p = part + 3 * (long long)blockIdx.x;
        p[0] = w.n;
        p[1] = w.mean;
        p[2] = w.m2;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_apply(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                const float* __restrict__ part, float* __restrict__ y, long long cols, float eps)
{
    const long long row = blockIdx.x / SPLIT;
    const int j = blockIdx.x % SPLIT;
    __shared__ float stats[2];
    if (threadIdx.x < 32) {
        // Warp 0 merges the row's partials (lanes stride over them).
        Welford w = {0.0f, 0.0f, 0.0f};
        const float* p = part + 3 * row * SPLIT;
        for (int k = threadIdx.x; k < SPLIT; k += 32) {
            const Welford o = {p[3 * k], p[3 * k + 1], p[3 * k + 2]};
            welford_merge(w, o);
        }
        welford_warp(w);
        if (threadIdx.x == 0) {
            stats[0] = w.mean;
            stats[1] = rsqrtf(w.m2 / (float)cols + eps);  // biased variance, as nn.LayerNorm
        }
    }
    __syncthreads();
    const long long chunk = chunk_len(cols);
    const long long lo = min(cols, j * chunk), hi = min(cols, lo + chunk);
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const bool vec = VEC && aligned16(xr) && aligned16(yr) && aligned16(weight) && aligned16(bias);
    normalise_span(xr, weight, bias, yr, lo, hi, stats[0], stats[1], vec);
}
""")

LAYERNORM_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

A row is the trailing prod(normalized_shape) elements; y = (x - mean) / sqrt(var + eps) * weight + bias
with the biased variance, like nn.LayerNorm.
"""

import math

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_THREADS = @THREADS@
_SPLIT = @SPLIT@
EPS = @EPS@


@LAYERNORM_MODULE@

@LAYERNORM_FORWARD_PY@
        @LAUNCH@
        return y
'''

_LAUNCH_BLOCK = """kernel = _function("layernorm_rows")
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr())
        _run_kernel(kernel, x.device, (rows,), (_THREADS,), (*ptrs, cupy.int64(cols), cupy.float32(EPS)))"""

_LAUNCH_SPLIT = """part = torch.empty(3 * rows * _SPLIT, dtype=torch.float32, device=x.device)
        partial = _function("layernorm_partial")
        apply = _function("layernorm_apply")
        grid = (rows * _SPLIT,)
        _run_kernel(partial, x.device, grid, (_THREADS,), (x.data_ptr(), part.data_ptr(), cupy.int64(cols)))
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), part.data_ptr(), y.data_ptr())
        _run_kernel(apply, x.device, grid, (_THREADS,), (*ptrs, cupy.int64(cols), cupy.float32(EPS)))"""


def layernorm_candidate(template: str, params: dict[str, Any], summary: str, cu: str, split: int, launch: str) -> str:
    """A LayerNorm candidate file around the kernel source ``cu``: the module, the checks, then ``launch``."""
    return fill(
        LAYERNORM_PY,
        LAYERNORM_MODULE=LAYERNORM_MODULE,
        LAYERNORM_FORWARD_PY=LAYERNORM_FORWARD_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        THREADS=params["block"],
        SPLIT=split,
        EPS=repr(float(params.get("eps", 1e-5))),
        LAUNCH=launch,
    )


def render_layernorm_block(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        LAYERNORM_BLOCK_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        VEC=c_bool(params["vec4"]),
        WELFORD=c_bool(params["stats"] == "welford"),
        COMMON=LAYERNORM_COMMON,
    )
    return layernorm_candidate("layernorm_cuda_block", params, summary, cu, 1, _LAUNCH_BLOCK)


def render_layernorm_split(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        LAYERNORM_SPLIT_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        VEC=c_bool(params["vec4"]),
        SPLIT=params["split"],
        COMMON=LAYERNORM_COMMON,
    )
    return layernorm_candidate("layernorm_cuda_split", params, summary, cu, params["split"], _LAUNCH_SPLIT)


__all__ = ["LAYERNORM_COMMON", "layernorm_candidate", "render_layernorm_block", "render_layernorm_split"]
