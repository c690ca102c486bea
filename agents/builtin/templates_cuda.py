"""CUDA kernel templates: NVRTC-compiled through CuPy ``RawModule`` at import, launched on torch's current stream.

Every template renders a complete candidate file like ``problems/candidates/*_cuda.py``. The kernel source is
one plain raw string literal whose ``#ifndef`` defaults are the chosen parameters, so the harness's NVRTC
pre-check compiles exactly the kernel that runs, and the literal is valid CUDA on its own.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.candidate_python import LAYERNORM_FORWARD_PY, MATMUL_OPERANDS_PY, SOFTMAX_ROWS_PY

# ----------------------------------------------------------------------------------------- softmax

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


# --------------------------------------------------------------------------------------- layernorm

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


# ------------------------------------------------------------------------------------------ matmul

MATMUL_CU = c_params(r"""
// fp32 C = A @ B, shared-memory tiled SIMT (no tensor cores, fp32 accumulate).
@SUMMARY_C@
// A block computes a BM x BN tile of C walking K in steps of BK; each thread keeps a TM x TN micro-tile
// in registers. Partial tiles are zero-padded in shared memory; out-of-range outputs are not stored.
// Batched over blockIdx.z (grid-stride), for bmm.
#param BM          // rows of C per block
#param BN          // columns of C per block
#param BK          // depth of one K step
#param TM           // rows of C per thread (a multiple of 4)
#param TN           // columns of C per thread (a multiple of 4)
#define THREADS ((BM / TM) * (BN / TN))

static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are read as float4");
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a whole number of warps, at most 1024 threads");
static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "tile loads divide evenly over the threads");

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
             int batch)
{
    // A's tile is stored transposed (As[k][m]) so that a thread reads its TM rows as float4s.
    // The +4 padding spreads the transposing stores over the banks and keeps rows 16-byte aligned.
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);  // column group of this thread
    const int ty = tid / (BN / TN);  // row group of this thread
    const int row0 = blockIdx.x * BM;
    const int col0 = blockIdx.y * BN;

    for (int g = blockIdx.z; g < batch; g += gridDim.z) {
        const float* a = A + (size_t)g * M * K;
        const float* b = B + (size_t)g * K * N;
        float* c = C + (size_t)g * M * N;

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

        for (int k0 = 0; k0 < K; k0 += BK) {
            // A[row0:row0+BM, k0:k0+BK]; consecutive threads read consecutive k of one row.
#pragma unroll
            for (int l = 0; l < BM * BK / THREADS; ++l) {
                const int i = tid + l * THREADS;
                const int m = i / BK, k = i % BK;
                const int gr = row0 + m, gk = k0 + k;
                As[k][m] = (gr < M && gk < K) ? a[(size_t)gr * K + gk] : 0.0f;
            }
            // B[k0:k0+BK, col0:col0+BN]; consecutive threads read consecutive columns.
#pragma unroll
            for (int l = 0; l < BK * BN / THREADS; ++l) {
                const int i = tid + l * THREADS;
                const int k = i / BN, n = i % BN;
                const int gk = k0 + k, gc = col0 + n;
                Bs[k][n] = (gk < K && gc < N) ? b[(size_t)gk * N + gc] : 0.0f;
            }
            __syncthreads();

#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float av[TM], bv[TN];
#pragma unroll
                for (int q = 0; q < TM / 4; ++q) {
                    const float4 t = *reinterpret_cast<const float4*>(&As[k][ty * TM + 4 * q]);
                    av[4 * q] = t.x;
                    av[4 * q + 1] = t.y;
                    av[4 * q + 2] = t.z;
                    av[4 * q + 3] = t.w;
                }
#pragma unroll
                for (int q = 0; q < TN / 4; ++q) {
                    const float4 t = *reinterpret_cast<const float4*>(&Bs[k][tx * TN + 4 * q]);
                    bv[4 * q] = t.x;
                    bv[4 * q + 1] = t.y;
                    bv[4 * q + 2] = t.z;
                    bv[4 * q + 3] = t.w;
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = row0 + ty * TM + i;
            if (r >= M) break;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int cc = col0 + tx * TN + j;
                if (cc < N) c[(size_t)r * N + cc] = acc[i][j];
            }
        }
    }
}
""")

MATMUL_PY = (
    r'''"""Builtin candidate `matmul_cuda_tiled` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 CUDA tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul),
fp32 accumulation.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_BM, _BN, _THREADS = @BM@, @BN@, @THREADS@
_INT_MAX = 2**31 - 1
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T


'''
    + MATMUL_OPERANDS_PY
    + r"""
        if max(M, N, K, batch) > _INT_MAX or (N + _BN - 1) // _BN > 65535:
            raise ValueError(f"shapes too large for this kernel: {tuple(A.shape)} @ {tuple(B.shape)}")
        C = torch.empty(out_shape, device=A.device, dtype=torch.float32)
        if C.numel() == 0:
            return C
        grid = ((M + _BM - 1) // _BM, (N + _BN - 1) // _BN, min(batch, 65535))
        args = (A.data_ptr(), B.data_ptr(), C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K))
        kernel = _function("matmul_tiled")
        _run_kernel(kernel, A.device, grid, (_THREADS,), (*args, cupy.int32(batch)))
        return C
"""
)


def render_matmul(params: dict[str, Any], summary: str) -> str:
    bm, bn, tm, tn = params["bm"], params["bn"], params["tm"], params["tn"]
    cu = fill(MATMUL_CU, SUMMARY_C=wrap(summary, "// "), BM=bm, BN=bn, BK=params["bk"], TM=tm, TN=tn)
    return fill(
        MATMUL_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        CUDA_SRC=cu,
        BM=bm,
        BN=bn,
        THREADS=(bm // tm) * (bn // tn),
        TRANSPOSED=transposed(params),
    )


RENDERERS = {
    "softmax_cuda_block": render_softmax_block,
    "softmax_cuda_warp": render_softmax_warp,
    "layernorm_cuda_block": render_layernorm_block,
    "layernorm_cuda_split": render_layernorm_split,
    "matmul_cuda_tiled": render_matmul,
}
