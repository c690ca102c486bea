"""Row softmax / log-softmax on the GPU: ``softmax_cuda_block`` (a block per row, the row kept in registers
when it fits) and ``softmax_cuda_warp`` (a warp per row, several rows a block, for short rows).

The kernel source is one plain raw string literal whose ``#ifndef`` defaults are the chosen parameters, so the
harness's NVRTC pre-check compiles exactly the kernel that runs, and the literal is valid CUDA on its own. The
candidate compiles it through CuPy's ``RawModule`` at import and launches it on torch's current stream.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, wrap
from agents.builtin.candidate_python import SOFTMAX_ROWS_PY

SOFTMAX_COMMON = r"""
#define NEG_INF __int_as_float(0xff800000)
#if FAST_EXP
#define EXP(v) __expf(v)
#else
#define EXP(v) expf(v)
#endif
// The output from x, the row max m and the row's factor c: softmax exp(x - m) * (1 / sum),
// log-softmax (x - m) - log(sum), subtracted in that order like torch.
#if LOG
#define ROW_FACTOR(s) logf(s)
#define OUT(v, m, c) (((v) - (m)) - (c))
#else
#define ROW_FACTOR(s) (1.0f / (s))
#define OUT(v, m, c) (EXP((v) - (m)) * (c))
#endif

// Merge the running pair (m, s) with (m2, s2): s is a sum of exp(x - m).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    if (m2 == NEG_INF) return;  // nothing to add (this also skips a float4 of -inf, whose s2 is NaN)
    const float mx = fmaxf(m, m2);
    s = s * EXP(m - mx) + s2 * EXP(m2 - mx);
    m = mx;
}

__device__ __forceinline__ void warp_merge(float& m, float& s)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
}

// Online (max, sum) over a strided share of one row: lane `first` of `stride` threads.
__device__ __forceinline__ void row_stats(const float* xr, long long cols, int first, int stride, float& m, float& s)
{
    const bool vec = VEC && ((reinterpret_cast<unsigned long long>(xr) & 15) == 0);
    const long long head = vec ? cols / 4 * 4 : 0;  // elements handled as float4
    for (long long i = first * 4LL; i < head; i += stride * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
        merge(m, s, vm, EXP(v.x - vm) + EXP(v.y - vm) + EXP(v.z - vm) + EXP(v.w - vm));
    }
    for (long long i = head + first; i < cols; i += stride) merge(m, s, xr[i], 1.0f);
}

// out = OUT(x, m, inv) over a strided share of one row (inv = ROW_FACTOR(sum)).
__device__ __forceinline__ void row_write(const float* xr, float* yr, long long cols, int first, int stride, float m,
                                          float inv)
{
    const bool vec = VEC && (((reinterpret_cast<unsigned long long>(xr) |
                               reinterpret_cast<unsigned long long>(yr)) & 15) == 0);
    const long long head = vec ? cols / 4 * 4 : 0;
    for (long long i = first * 4LL; i < head; i += stride * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        float4 r;
        r.x = OUT(v.x, m, inv);
        r.y = OUT(v.y, m, inv);
        r.z = OUT(v.z, m, inv);
        r.w = OUT(v.w, m, inv);
        *reinterpret_cast<float4*>(yr + i) = r;
    }
    for (long long i = head + first; i < cols; i += stride) yr[i] = OUT(xr[i], m, inv);
}
"""

SOFTMAX_BLOCK_CU = c_params(r"""
// Row softmax, one block per row.
@SUMMARY_C@
#param BLOCK      // threads per block (a multiple of 32, at most 1024)
#param VEC          // float4 loads and stores when the row is 16-byte aligned
#param FAST_EXP     // __expf (ex2.approx, ~2 ulp near 0) instead of expf
#param ITEMS        // row elements per thread kept in registers when the row fits (0: stream it twice)
#param LOG          // 1: log-softmax, (x - max) - log(sum)
#define WARPS (BLOCK / 32)
@COMMON@
// Block-wide merge of every thread's (m, s); afterwards every thread holds the row's pair.
__device__ __forceinline__ void block_merge(float& m, float& s)
{
    __shared__ float sm[WARPS], ss[WARPS];
    warp_merge(m, s);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    m = lane < WARPS ? sm[lane] : NEG_INF;
    s = lane < WARPS ? ss[lane] : 0.0f;
    warp_merge(m, s);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_rows(const float* __restrict__ x, float* __restrict__ out, long long cols)
{
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = out + (long long)blockIdx.x * cols;
#if ITEMS > 0
    if (cols <= (long long)BLOCK * ITEMS) {
        // The row fits in registers: read it once, exp from registers, write once.
        float r[ITEMS];
        float m = NEG_INF;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = (long long)k * BLOCK + threadIdx.x;
            r[k] = i < cols ? xr[i] : NEG_INF;
            m = fmaxf(m, r[k]);
        }
        float s = 0.0f;
        if (m != NEG_INF) {
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) s += EXP(r[k] - m);  // exp(-inf) = 0 for the padding
        }
        block_merge(m, s);
        const float inv = ROW_FACTOR(s);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = (long long)k * BLOCK + threadIdx.x;
            if (i < cols) yr[i] = OUT(r[k], m, inv);
        }
        return;
    }
#endif
    // Pass 1: per-thread online max and sum, then the block's. Pass 2: normalise.
    float m = NEG_INF, s = 0.0f;
    row_stats(xr, cols, threadIdx.x, BLOCK, m, s);
    block_merge(m, s);
    row_write(xr, yr, cols, threadIdx.x, BLOCK, m, ROW_FACTOR(s));
}
""")

SOFTMAX_WARP_CU = c_params(r"""
// Row softmax, one warp per row.
@SUMMARY_C@
#param ROWS_PER_BLOCK  // warps (= rows) per block
#param VEC          // float4 loads and stores when the row is 16-byte aligned
#param FAST_EXP     // __expf (ex2.approx, ~2 ulp near 0) instead of expf
#param ITEMS        // row elements per lane kept in registers when the row fits (0: stream it twice)
#param LOG          // 1: log-softmax, (x - max) - log(sum)
@COMMON@
extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
softmax_rows(const float* __restrict__ x, float* __restrict__ out, long long rows, long long cols)
{
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
    const int lane = threadIdx.x % 32;
    const float* xr = x + row * cols;
    float* yr = out + row * cols;
#if ITEMS > 0
    if (cols <= 32LL * ITEMS) {
        float r[ITEMS];
        float m = NEG_INF;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = (long long)k * 32 + lane;
            r[k] = i < cols ? xr[i] : NEG_INF;
            m = fmaxf(m, r[k]);
        }
        float s = 0.0f;
        if (m != NEG_INF) {
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) s += EXP(r[k] - m);
        }
        warp_merge(m, s);
        const float inv = ROW_FACTOR(s);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = (long long)k * 32 + lane;
            if (i < cols) yr[i] = OUT(r[k], m, inv);
        }
        return;
    }
#endif
    float m = NEG_INF, s = 0.0f;
    row_stats(xr, cols, lane, 32, m, s);
    warp_merge(m, s);
    row_write(xr, yr, cols, lane, 32, m, ROW_FACTOR(s));
}
""")

SOFTMAX_PY = (
    r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@WHAT_TITLE@ over the last dim (dim 1 of the problem's 2-D input), any number of rows and columns.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_THREADS = @THREADS@
_ROWS_PER_BLOCK = @ROWS_PER_BLOCK@


'''
    + SOFTMAX_ROWS_PY
    + r"""
        blocks = (rows + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK
        kernel = _function("softmax_rows")
        @LAUNCH@
        return out
"""
)


def _softmax_what(params: dict[str, Any]) -> str:
    return "log_softmax" if params.get("op") == "log_softmax" else "softmax"


def render_softmax_block(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        SOFTMAX_BLOCK_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        VEC=c_bool(params["vec4"]),
        FAST_EXP=c_bool(params["fast_exp"]),
        ITEMS=params["items"],
        LOG=c_bool(params.get("op") == "log_softmax"),
        COMMON=SOFTMAX_COMMON,
    )
    launch = "_run_kernel(kernel, x.device, (blocks,), (_THREADS,), (x.data_ptr(), out.data_ptr(), cupy.int64(cols)))"
    return fill(
        SOFTMAX_PY,
        TEMPLATE="softmax_cuda_block",
        WHAT=_softmax_what(params),
        WHAT_TITLE=_softmax_what(params).capitalize(),
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        THREADS=params["block"],
        ROWS_PER_BLOCK=1,
        LAUNCH=launch,
    )


def render_softmax_warp(params: dict[str, Any], summary: str) -> str:
    cu = fill(
        SOFTMAX_WARP_CU,
        SUMMARY_C=wrap(summary, "// "),
        ROWS_PER_BLOCK=params["rows_per_block"],
        VEC=c_bool(params["vec4"]),
        FAST_EXP=c_bool(params["fast_exp"]),
        ITEMS=params["items"],
        LOG=c_bool(params.get("op") == "log_softmax"),
        COMMON=SOFTMAX_COMMON,
    )
    launch = (
        "_run_kernel(kernel, x.device, (blocks,), (_THREADS,), "
        "(x.data_ptr(), out.data_ptr(), cupy.int64(rows), cupy.int64(cols)))"
    )
    return fill(
        SOFTMAX_PY,
        TEMPLATE="softmax_cuda_warp",
        WHAT=_softmax_what(params),
        WHAT_TITLE=_softmax_what(params).capitalize(),
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        THREADS=32 * params["rows_per_block"],
        ROWS_PER_BLOCK=params["rows_per_block"],
        LAUNCH=launch,
    )


__all__ = ["render_softmax_block", "render_softmax_warp"]
