"""Reductions over one dim on CUDA (NVRTC through CuPy): ``reduce_cuda_rows`` and ``reduce_cuda_inner``.

- ``inner == 1``, the reduced elements are contiguous: a group of ``tpr`` threads per row (sub-warp groups
  for short rows, a warp, or several warps), float4 loads after a scalar head to a 16-byte boundary, shuffle
  reductions; long rows are split over several blocks whose partials a second small kernel merges.
- ``inner > 1``, the reduced elements are ``inner`` apart: threads run across the inner dim (coalesced
  loads of consecutive columns) and loop over the reduced one, optionally several threads per column
  (``by``) merged through shared memory, and a split of the reduced dim over blocks.

argmax / argmin return int64 indices with torch's tie rule (the first occurrence wins; a NaN wins over any
number, the first NaN over later ones); max / min propagate NaN like torch.max. mean divides the fp32 sum by
the count in fp32, as torch does.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_reduce_python import (
    LAYOUT_PY,
    OP_CODES,
    about,
    inner_constants,
    params_text,
    rows_constants,
    spec_of,
)

REDUCE_COMMON_CU = c_params(r"""
#param OP            // 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin
#define IS_ARG (OP >= 4)
#define IS_MAX (OP == 2 || OP == 4)
#define NO_INDEX 0x7fffffff
#if OP <= 1
#define IDENTITY 0.0f
#elif IS_MAX
#define IDENTITY __int_as_float(0xff800000)
#else
#define IDENTITY __int_as_float(0x7f800000)
#endif
#if IS_ARG
typedef long long out_t;  // torch's argmax / argmin give int64
#else
typedef float out_t;
#endif

struct Acc {
    float v;  // running sum, extreme value, or the value at index i
    int i;    // index along the reduced dim (arg ops; NO_INDEX until an element is seen)
};

__device__ __forceinline__ Acc acc_init()
{
    Acc a;
    a.v = IDENTITY;
    a.i = NO_INDEX;
    return a;
}

// Does (v2, i2) replace (v, i)? A strictly better value; a NaN over a number (torch treats NaN as the
// extreme); an equal value, or another NaN, at a lower index (torch returns the first occurrence).
__device__ __forceinline__ bool wins(float v2, int i2, float v, int i)
{
#if IS_MAX
    const bool better = v2 > v;
#else
    const bool better = v2 < v;
#endif
    const bool nan2 = v2 != v2, nan = v != v;
    return better || (nan2 && !nan) || ((v2 == v || (nan2 && nan)) && i2 < i);
}

__device__ __forceinline__ void acc_add(Acc& a, float v, int i)
{
#if OP <= 1
    a.v += v;
#elif !IS_ARG
    // Once a NaN is in, nothing compares past it: NaN propagates like torch.max / torch.min.
#if IS_MAX
    if (v > a.v || v != v) a.v = v;
#else
    if (v < a.v || v != v) a.v = v;
#endif
#else
    if (wins(v, i, a.v, a.i)) {
        a.v = v;
        a.i = i;
    }
#endif
}

// acc_add for a thread's own elements, which come in ascending index order: a later equal value never wins
// there, so argmax / argmin need one compare and a NaN test instead of wins()'s tie rule (the rule's cost per
// element, not the loads, was what held them back). Takes v when it is better, or a NaN while a.v is not; an
// element equal to the identity (-inf for argmax) is not taken, so a run of them leaves NO_INDEX, which
// acc_result reads as index 0 (every element was the identity: torch returns the first).
__device__ __forceinline__ void acc_next(Acc& a, float v, int i)
{
#if IS_ARG
#if IS_MAX
    const bool take = !(v <= a.v) && a.v == a.v;
#else
    const bool take = !(v >= a.v) && a.v == a.v;
#endif
    if (take) {
        a.v = v;
        a.i = i;
    }
#else
    acc_add(a, v, i);
#endif
}

__device__ __forceinline__ void acc_merge(Acc& a, const Acc& b)
{
#if IS_ARG
    if (wins(b.v, b.i, a.v, a.i)) a = b;
#else
    acc_add(a, b.v, 0);
#endif
}

__device__ __forceinline__ Acc acc_shfl(const Acc& a, int off)
{
    Acc b;
    b.v = __shfl_xor_sync(0xffffffffu, a.v, off);
#if IS_ARG
    b.i = __shfl_xor_sync(0xffffffffu, a.i, off);
#else
    b.i = 0;
#endif
    return b;
}

__device__ __forceinline__ out_t acc_result(const Acc& a, long long n)
{
#if OP == 1
    return a.v / (float)n;  // like torch: the fp32 sum divided by the count in fp32
#elif IS_ARG
    return a.i == NO_INDEX ? (out_t)0 : (out_t)a.i;
#else
    return a.v;
#endif
}

// Merges the SPLIT partials of every output (partial j of output o at part[j * n_out + o]), in order.
extern "C" __global__ void reduce_finish(const Acc* __restrict__ part, out_t* __restrict__ out, long long n_out,
                                         long long reduced, int split)
{
    const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    Acc a = acc_init();
    for (int j = 0; j < split; ++j) acc_merge(a, part[(long long)j * n_out + o]);
    out[o] = acc_result(a, reduced);
}
""")

REDUCE_ROWS_CU = c_params(r"""
// Reduction over a contiguous (last) dim: TPR threads per row.
@SUMMARY_C@
#param BLOCK      // threads per block
#param TPR          // threads per row (4..1024, a power of two): BLOCK / TPR rows per block
#param VEC          // float4 loads after a scalar head up to a 16-byte boundary
#param UNROLL       // float4 loads in flight per thread, each into its own accumulator
#param SPLIT        // blocks per row (> 1: partials, merged by reduce_finish)
#define RPB (BLOCK / TPR)
@COMMON@
static_assert(TPR >= 4 && (TPR & (TPR - 1)) == 0 && TPR <= BLOCK && BLOCK % 32 == 0, "TPR: a power of two");

__device__ __forceinline__ void add4(Acc& a, const float4 v, int i)
{
#if OP <= 1
    a.v += (v.x + v.y) + (v.z + v.w);
#else
    acc_next(a, v.x, i);
    acc_next(a, v.y, i + 1);
    acc_next(a, v.z, i + 2);
    acc_next(a, v.w, i + 3);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_rows(const float* __restrict__ x, out_t* __restrict__ out, Acc* __restrict__ part, long long rows,
            long long cols)
{
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    // Chunks are multiples of 4 elements, so a row's float4 grid is the same in every chunk.
    const long long chunk = ((cols + SPLIT - 1) / SPLIT + 3) / 4 * 4;
    const long long lo = min(cols, (long long)blockIdx.y * chunk), hi = min(cols, lo + chunk);
    Acc acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = acc_init();
    if (row < rows) {  // no early return: every thread takes part in the shuffles below
        const float* xr = x + row * cols;
        long long body = lo, end = lo;
        if (VEC) {
            // At most 3 scalar elements up to a 16-byte boundary (one per thread), then float4s.
            body = min(hi, lo + (long long)(((16 - (reinterpret_cast<unsigned long long>(xr + lo) & 15)) & 15) / 4));
            if (lo + t < body) acc_next(acc[0], xr[lo + t], (int)(lo + t));
            end = body + (hi - body) / 4 * 4;
            long long i = body + 4LL * t;
            for (; i + 4LL * TPR * (UNROLL - 1) < end; i += 4LL * TPR * UNROLL) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(reinterpret_cast<const float4*>(xr + i + 4LL * TPR * u));
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) add4(acc[u], v[u], (int)(i + 4LL * TPR * u));
            }
            for (; i < end; i += 4LL * TPR) add4(acc[0], __ldg(reinterpret_cast<const float4*>(xr + i)), (int)i);
        }
        for (long long k = end + t; k < hi; k += TPR) acc_next(acc[0], __ldg(xr + k), (int)k);
    }
    Acc a = acc[0];
#pragma unroll
    for (int u = 1; u < UNROLL; ++u) acc_merge(a, acc[u]);
    // The row's TPR threads: shuffles inside a warp (sub-warp groups stay within their lanes) ...
#pragma unroll
    for (int off = (TPR < 32 ? TPR : 32) / 2; off > 0; off >>= 1) acc_merge(a, acc_shfl(a, off));
#if TPR > 32
    // ... then the row's warps through shared memory, merged by its first warp.
    __shared__ Acc warp_part[BLOCK / 32];
    if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = a;
    __syncthreads();
    if (t < 32) {
        a = t < TPR / 32 ? warp_part[threadIdx.x / 32 + t] : acc_init();
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc_merge(a, acc_shfl(a, off));
    }
#endif
    if (t == 0 && row < rows) {
        if (SPLIT == 1)
            out[row] = acc_result(a, cols);
        else
            part[(long long)blockIdx.y * rows + row] = a;
    }
}
""")

REDUCE_INNER_CU = c_params(r"""
// Reduction over a strided dim: BX threads across the inner dim (V adjacent columns each, coalesced), BY
// threads down the reduced dim per column, SPLIT blocks along the reduced dim.
@SUMMARY_C@
#param BX           // threads across the inner dim
#param BY            // threads down the reduced dim, merged through shared memory
#param SPLIT        // blocks along the reduced dim (> 1: partials, merged by reduce_finish)
@COMMON@
static_assert(BX * BY <= 1024 && (BX * BY) % 32 == 0, "a whole number of warps, at most 1024 threads");

template <int V>
__device__ __forceinline__ void reduce_inner_body(const float* __restrict__ x, out_t* __restrict__ out,
                                                  Acc* __restrict__ part, long long outer, long long red,
                                                  long long inner)
{
    const int tx = threadIdx.x % BX, ty = threadIdx.x / BX;
    const long long tiles = (inner + BX * V - 1) / (BX * V);
    const long long o = blockIdx.x / tiles;
    const long long c = (blockIdx.x % tiles) * (BX * V) + (long long)tx * V;  // first column of this thread
    const long long chunk = (red + SPLIT - 1) / SPLIT;
    const long long lo = min(red, (long long)blockIdx.y * chunk), hi = min(red, lo + chunk);
    Acc a[V];
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = acc_init();
    if (c < inner) {  // V == 4 only when inner % 4 == 0: the whole float4 is in range
        const float* xo = x + o * red * inner + c;
#pragma unroll 4
        for (long long r = lo + ty; r < hi; r += BY) {
            if constexpr (V == 4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(xo + r * inner));
                acc_next(a[0], v.x, (int)r);
                acc_next(a[1], v.y, (int)r);
                acc_next(a[2], v.z, (int)r);
                acc_next(a[3], v.w, (int)r);
            } else {
                acc_next(a[0], __ldg(xo + r * inner), (int)r);
            }
        }
    }
#if BY > 1
    __shared__ Acc rest[BY - 1][BX * 4];
    if (ty > 0) {
#pragma unroll
        for (int k = 0; k < V; ++k) rest[ty - 1][tx * V + k] = a[k];
    }
    __syncthreads();
    if (ty > 0) return;
    for (int q = 0; q < BY - 1; ++q) {
#pragma unroll
        for (int k = 0; k < V; ++k) acc_merge(a[k], rest[q][tx * V + k]);
    }
#endif
    if (ty > 0 || c >= inner) return;
    const long long n_out = outer * inner;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const long long idx = o * inner + c + k;
        if (SPLIT == 1)
            out[idx] = acc_result(a[k], red);
        else
            part[(long long)blockIdx.y * n_out + idx] = a[k];
    }
}

extern "C" __global__ void __launch_bounds__(BX * BY)
reduce_inner_v4(const float* __restrict__ x, out_t* __restrict__ out, Acc* __restrict__ part, long long outer,
                long long red, long long inner)
{
    reduce_inner_body<4>(x, out, part, outer, red, inner);
}

extern "C" __global__ void __launch_bounds__(BX * BY)
reduce_inner_v1(const float* __restrict__ x, out_t* __restrict__ out, Acc* __restrict__ part, long long outer,
                long long red, long long inner)
{
    reduce_inner_body<1>(x, out, part, outer, red, inner);
}
""")

REDUCE_CUDA_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@ABOUT@
"""

import functools

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
OP = "@OP@"
DIMS = @DIMS@  # as the reference names them (None: every dim)
KEEPDIM = @KEEPDIM@
_INDEX = OP in ("argmax", "argmin")
_ACC_BYTES = 8  # struct Acc: a float and an int
@CONSTANTS@
@LAYOUT@

def _partials(n_out: int, device: torch.device) -> tuple[torch.Tensor | None, int]:
    """Scratch for the split kernels' partials (struct Acc: 8 bytes each) and its address; (None, 0) without a
    split (the kernel never reads the null pointer, and the call's host path makes no allocation)."""
    if _SPLIT == 1:
        return None, 0
    part = torch.empty(_SPLIT * n_out * _ACC_BYTES // 4, dtype=torch.float32, device=device)
    return part, part.data_ptr()


class ModelNew(nn.Module):
    """Same constructor arguments as the problem's Model; the dims they choose were read when this file was
    written (they are DIMS and KEEPDIM above), so the arguments are accepted and not needed."""

    def __init__(self, *init_args: object, **init_kwargs: object):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        outer, red, inner, out_shape = _layout(tuple(x.shape))
        out = torch.empty(out_shape, dtype=torch.int64 if _INDEX else torch.float32, device=x.device)
        n_out = outer * inner
        if n_out == 0:
            return out
        if red == 0:
            if OP not in ("sum", "mean"):
                raise ValueError(f"{OP} of an empty dim")
            return out.fill_(0.0 if OP == "sum" else float("nan"))
        if red >= 2**31:
            raise ValueError(f"a reduced dim of {red} elements: the kernel indexes it with 32-bit integers")
        @LAUNCH@
        if _SPLIT > 1:
            finish = _function("reduce_finish")
            args = (part_ptr, out.data_ptr(), cupy.int64(n_out), cupy.int64(red), cupy.int32(_SPLIT))
            _run_kernel(finish, x.device, ((n_out + 255) // 256,), (256,), args)
        return out
'''

_LAUNCH_ROWS = """if inner != 1:
            raise ValueError(f"this kernel reduces a contiguous dim; {tuple(x.shape)} has {inner} after it")
        part, part_ptr = _partials(n_out, x.device)
        kernel = _function("reduce_rows")
        grid = ((outer + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK, _SPLIT)
        args = (x.data_ptr(), out.data_ptr(), part_ptr, cupy.int64(outer), cupy.int64(red))
        _run_kernel(kernel, x.device, grid, (_BLOCK,), args)"""

_LAUNCH_INNER = """part, part_ptr = _partials(n_out, x.device)
        v = 4 if _VEC and inner % 4 == 0 and x.data_ptr() % 16 == 0 else 1
        kernel = _function("reduce_inner_v4" if v == 4 else "reduce_inner_v1")
        grid = (outer * ((inner + _BX * v - 1) // (_BX * v)), _SPLIT)
        sizes = (cupy.int64(outer), cupy.int64(red), cupy.int64(inner))
        _run_kernel(kernel, x.device, grid, (_BX * _BY,), (x.data_ptr(), out.data_ptr(), part_ptr, *sizes))"""


def _reduce_py(template: str, params: dict[str, Any], summary: str, cu: str, constants: str, launch: str) -> str:
    spec = spec_of(params)
    op = params.get("op") or "sum"
    return fill(
        REDUCE_CUDA_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        ABOUT=about(params, "CUDA"),
        KEEPDIM=repr(bool(spec.get("keepdim", False))),
        CUDA_SRC=cu,
        OP=op,
        DIMS=repr(spec.get("dims")),
        CONSTANTS=constants,
        LAYOUT=LAYOUT_PY,
        LAUNCH=launch,
    )


def render_reduce_rows(params: dict[str, Any], summary: str) -> str:
    op = params.get("op") or "sum"
    common = fill(REDUCE_COMMON_CU, OP=OP_CODES[op])
    cu = fill(
        REDUCE_ROWS_CU,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        TPR=params["tpr"],
        VEC=c_bool(params["vec4"]),
        UNROLL=params["unroll"],
        SPLIT=params["split"],
        COMMON=common,
    )
    return _reduce_py("reduce_cuda_rows", params, summary, cu, rows_constants(params), _LAUNCH_ROWS)


def render_reduce_inner(params: dict[str, Any], summary: str) -> str:
    op = params.get("op") or "sum"
    common = fill(REDUCE_COMMON_CU, OP=OP_CODES[op])
    cu = fill(
        REDUCE_INNER_CU,
        SUMMARY_C=wrap(summary, "// "),
        BX=params["bx"],
        BY=params["by"],
        SPLIT=params["split"],
        COMMON=common,
    )
    return _reduce_py("reduce_cuda_inner", params, summary, cu, inner_constants(params, split=True), _LAUNCH_INNER)
