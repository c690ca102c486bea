"""Kernel templates for reductions over one dim and for RMSNorm, on CUDA (NVRTC through CuPy) and the CPU (C).

Both families see the input as ``(outer, reduced, inner)`` (``agents.builtin.recognise_reduce``):

- ``inner == 1``, the reduced elements are contiguous: a group of ``tpr`` threads per row (sub-warp groups
  for short rows, a warp, or several warps), float4 loads after a scalar head to a 16-byte boundary, shuffle
  reductions; long rows are split over several blocks whose partials a second small kernel merges.
- ``inner > 1``, the reduced elements are ``inner`` apart: threads run across the inner dim (coalesced
  loads of consecutive columns) and loop over the reduced one, optionally several threads per column
  (``by``) merged through shared memory, and a split of the reduced dim over blocks.

argmax / argmin return int64 indices with torch's tie rule (the first occurrence wins; a NaN wins over any
number, the first NaN over later ones); max / min propagate NaN like torch.max. mean divides the fp32 sum by
the count in fp32, as torch does. Every candidate file is complete: the kernel source is one raw string
literal whose ``#ifndef`` defaults are the chosen parameters, like ``templates_cuda`` and ``templates_cpu``.
"""

from __future__ import annotations

import json
from typing import Any

from agents.builtin._text import c_bool, fill, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block

OP_CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "argmin": 5}

# ------------------------------------------------------------------------------ shared Python parts

# How a candidate finds (outer, reduced, inner) and the output shape from the input's shape at run time,
# so that it works for any sizes (the harness also runs it on a second, smaller shape).
LAYOUT_PY = r'''
def _layout(shape: tuple[int, ...]) -> tuple[int, int, int, list[int]]:
    """(outer, reduced, inner, output shape) of a reduction of ``shape`` over DIMS (None: every dim)."""
    nd = len(shape)
    dims = sorted({d % nd for d in DIMS}) if DIMS and nd else list(range(nd))
    if not dims:
        return 1, 1, 1, []
    lo, hi = dims[0], dims[-1]
    if dims != list(range(lo, hi + 1)):
        raise ValueError(f"dims {DIMS} of a {nd}-d input are not contiguous")
    outer = reduced = inner = 1
    for i, d in enumerate(shape):
        if i < lo:
            outer *= d
        elif i <= hi:
            reduced *= d
        else:
            inner *= d
    if KEEPDIM:
        out_shape = [1 if lo <= i <= hi else d for i, d in enumerate(shape)]
    else:
        out_shape = [d for i, d in enumerate(shape) if not lo <= i <= hi]
    return outer, reduced, inner, out_shape
'''

WHAT = {
    "sum": "sum",
    "mean": "mean",
    "max": "maximum (values)",
    "min": "minimum (values)",
    "argmax": "argmax (int64 indices, first occurrence on ties)",
    "argmin": "argmin (int64 indices, first occurrence on ties)",
}


def _spec(params: dict[str, Any]) -> dict[str, Any]:
    return json.loads(params.get("spec") or "{}")


def _dims_text(dims: list[int] | None) -> str:
    return "every dim" if not dims else ("dim " if len(dims) == 1 else "dims ") + ", ".join(map(str, dims))


def _about(params: dict[str, Any], device: str) -> str:
    """The candidate docstring's line on what it computes."""
    spec = _spec(params)
    what = WHAT[params.get("op") or "sum"]
    keepdim = bool(spec.get("keepdim", False))
    dims = _dims_text(spec.get("dims"))
    return wrap(f"The {what} of a float32 {device} tensor over {dims} (keepdim={keepdim}), as the problem's Model.")


def _params_text(params: dict[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k not in ("spec", "op")}
    return wrap(", ".join(f"{k}={v!r}" for k, v in sorted(shown.items())))


# ---------------------------------------------------------------------------------- reduce, CUDA

REDUCE_COMMON_CU = r"""
#ifndef OP
#define OP @OP@            // 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin
#endif
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
    return (out_t)a.i;
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
"""

REDUCE_ROWS_CU = r"""
// Reduction over a contiguous (last) dim: TPR threads per row.
@SUMMARY_C@
#ifndef BLOCK
#define BLOCK @BLOCK@      // threads per block
#endif
#ifndef TPR
#define TPR @TPR@          // threads per row (4..1024, a power of two): BLOCK / TPR rows per block
#endif
#ifndef VEC
#define VEC @VEC@          // float4 loads after a scalar head up to a 16-byte boundary
#endif
#ifndef UNROLL
#define UNROLL @UNROLL@       // float4 loads in flight per thread, each into its own accumulator
#endif
#ifndef SPLIT
#define SPLIT @SPLIT@        // blocks per row (> 1: partials, merged by reduce_finish)
#endif
#define RPB (BLOCK / TPR)
@COMMON@
static_assert(TPR >= 4 && (TPR & (TPR - 1)) == 0 && TPR <= BLOCK && BLOCK % 32 == 0, "TPR: a power of two");

__device__ __forceinline__ void add4(Acc& a, const float4 v, int i)
{
#if OP <= 1
    a.v += (v.x + v.y) + (v.z + v.w);
#else
    acc_add(a, v.x, i);
    acc_add(a, v.y, i + 1);
    acc_add(a, v.z, i + 2);
    acc_add(a, v.w, i + 3);
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
            if (lo + t < body) acc_add(acc[0], xr[lo + t], (int)(lo + t));
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
        for (long long k = end + t; k < hi; k += TPR) acc_add(acc[0], __ldg(xr + k), (int)k);
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
"""

REDUCE_INNER_CU = r"""
// Reduction over a strided dim: BX threads across the inner dim (V adjacent columns each, coalesced), BY
// threads down the reduced dim per column, SPLIT blocks along the reduced dim.
@SUMMARY_C@
#ifndef BX
#define BX @BX@           // threads across the inner dim
#endif
#ifndef BY
#define BY @BY@            // threads down the reduced dim, merged through shared memory
#endif
#ifndef SPLIT
#define SPLIT @SPLIT@        // blocks along the reduced dim (> 1: partials, merged by reduce_finish)
#endif
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
                acc_add(a[0], v.x, (int)r);
                acc_add(a[1], v.y, (int)r);
                acc_add(a[2], v.z, (int)r);
                acc_add(a[3], v.w, (int)r);
            } else {
                acc_add(a[0], __ldg(xo + r * inner), (int)r);
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
"""

REDUCE_CUDA_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@ABOUT@
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
OP = "@OP@"
DIMS = @DIMS@  # as the reference names them (None: every dim)
KEEPDIM = @KEEPDIM@
_INDEX = OP in ("argmax", "argmin")
_ACC_BYTES = 8  # struct Acc: a float and an int
@CONSTANTS@
@LAYOUT@

def _partials(n_out: int, device: torch.device) -> torch.Tensor:
    """Scratch for the split kernels' partials (struct Acc: 8 bytes each); empty without a split."""
    return torch.empty(_SPLIT * n_out * _ACC_BYTES // 4 if _SPLIT > 1 else 0, dtype=torch.float32, device=device)


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
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            @LAUNCH@
            if _SPLIT > 1:
                finish = _MODULE.get_function("reduce_finish")
                args = (part.data_ptr(), out.data_ptr(), cupy.int64(n_out), cupy.int64(red), cupy.int32(_SPLIT))
                finish(((n_out + 255) // 256,), (256,), args)
        return out
'''

_LAUNCH_ROWS = """if inner != 1:
                raise ValueError(f"this kernel reduces a contiguous dim; {tuple(x.shape)} has {inner} after it")
            part = _partials(n_out, x.device)
            kernel = _MODULE.get_function("reduce_rows")
            grid = ((outer + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK, _SPLIT)
            args = (x.data_ptr(), out.data_ptr(), part.data_ptr(), cupy.int64(outer), cupy.int64(red))
            kernel(grid, (_BLOCK,), args)"""

_LAUNCH_INNER = """part = _partials(n_out, x.device)
            v = 4 if _VEC and inner % 4 == 0 and x.data_ptr() % 16 == 0 else 1
            kernel = _MODULE.get_function("reduce_inner_v4" if v == 4 else "reduce_inner_v1")
            grid = (outer * ((inner + _BX * v - 1) // (_BX * v)), _SPLIT)
            sizes = (cupy.int64(outer), cupy.int64(red), cupy.int64(inner))
            kernel(grid, (_BX * _BY,), (x.data_ptr(), out.data_ptr(), part.data_ptr(), *sizes))"""


def _reduce_py(template: str, params: dict[str, Any], summary: str, cu: str, constants: str, launch: str) -> str:
    spec = _spec(params)
    op = params.get("op") or "sum"
    return fill(
        REDUCE_CUDA_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        ABOUT=_about(params, "CUDA"),
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
    block, tpr = params["block"], params["tpr"]
    constants = f"_BLOCK, _ROWS_PER_BLOCK, _SPLIT = {block}, {block // tpr}, {params['split']}\n"
    return _reduce_py("reduce_cuda_rows", params, summary, cu, constants, _LAUNCH_ROWS)


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
    constants = (
        f"_BX, _BY, _SPLIT = {params['bx']}, {params['by']}, {params['split']}\n"
        f"_VEC = {params['vec4']!r}  # float4 columns when the inner dim is a multiple of 4\n"
    )
    return _reduce_py("reduce_cuda_inner", params, summary, cu, constants, _LAUNCH_INNER)


# ----------------------------------------------------------------------------------- reduce, CPU

REDUCE_C = r"""
/* Reduction of x viewed as (outer, reduced, inner) over its middle dim.
@SUMMARY_C@ */
#ifndef OP
#define OP @OP@            /* 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin */
#endif
#ifndef VW
#define VW @VW@            /* floats per vector */
#endif
#ifndef UNROLL
#define UNROLL @UNROLL@        /* independent vector accumulators along a row */
#endif
#ifndef PARALLEL
#define PARALLEL @PARALLEL@      /* OpenMP at all */
#endif
#ifndef SPLIT
#define SPLIT @SPLIT@         /* 1: the reduced dim is cut into tasks too, partials merged in order */
#endif
#ifndef CHUNK
#define CHUNK @CHUNK@      /* elements of the reduced data per task when SPLIT */
#endif
#ifndef CB
#define CB @CB@          /* inner > 1: columns per task, their accumulators kept in L1 */
#endif
@PRELUDE@
#include <math.h>
#define IS_ARG (OP >= 4)
#define IS_MAX (OP == 2 || OP == 4)
#if OP <= 1
#define IDENTITY 0.0f
#elif IS_MAX
#define IDENTITY (-__builtin_inff())
#else
#define IDENTITY __builtin_inff()
#endif
#if IS_MAX
#define BETTER(a, b) ((a) > (b))
#else
#define BETTER(a, b) ((a) < (b))
#endif
/* Sums: float vectors over sub-blocks of SB elements (RB rows when strided), folded into doubles. */
#define SB (STEP * 16)
#define RB 64

typedef struct { double v; int64_t i; } acc_t;  /* sum or extreme value; index along the reduced dim */

static inline acc_t acc_init(void) { acc_t a = {IDENTITY, INT64_MAX}; return a; }

/* Does (v2, i2) replace (v, i)? A strictly better value; a NaN over a number (torch treats NaN as the
   extreme); an equal value, or another NaN, at a lower index (torch returns the first occurrence). */
static inline int wins(double v2, int64_t i2, double v, int64_t i)
{
    const int nan2 = v2 != v2, nan = v != v;
    return BETTER(v2, v) || (nan2 && !nan) || ((v2 == v || (nan2 && nan)) && i2 < i);
}

static inline void acc_add(acc_t* a, double v, int64_t i)
{
#if OP <= 1
    a->v += v;
#elif !IS_ARG
    if (BETTER(v, a->v) || v != v) a->v = v;  /* a NaN, once in, stays: like torch.max / torch.min */
#else
    if (wins(v, i, a->v, a->i)) {
        a->v = v;
        a->i = i;
    }
#endif
}

static inline void acc_merge(acc_t* a, acc_t b)
{
#if IS_ARG
    if (wins(b.v, b.i, a->v, a->i)) *a = b;
#else
    acc_add(a, b.v, 0);
#endif
}

static inline void store(void* restrict out, int64_t o, acc_t a, int64_t red)
{
#if IS_ARG
    ((int64_t*)out)[o] = a.i;
#elif OP == 1
    ((float*)out)[o] = (float)a.v / (float)red;  /* like torch: the fp32 sum divided by the count in fp32 */
#else
    ((float*)out)[o] = (float)a.v;
    (void)red;
#endif
}

static inline vf vsel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vi visel(vi m, vi a, vi b) { return (m & a) | (~m & b); }

/* ---- inner == 1: x[lo:hi) of one contiguous row, vectorised along the row ---- */

static float sum_of(const float* restrict x, int64_t lo, int64_t hi)
{
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) acc[u] += vload(x + j + u * VW);
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) s += x[j];
    return s;
}

static acc_t span(const float* restrict x, int64_t lo, int64_t hi)
{
    acc_t a = acc_init();
#if OP <= 1
    double s = 0.0;
    for (int64_t b = lo; b < hi; b += SB) s += (double)sum_of(x, b, min64(b + SB, hi));
    a.v = s;
    return a;
#else
    int64_t j = lo;
    if (hi - lo >= STEP) {
        /* Every lane starts from a real element, so its (value, index) is always a candidate. */
        vf best[UNROLL];
#if IS_ARG
        vi at[UNROLL], iota;
        for (int l = 0; l < VW; ++l) iota[l] = l;
#endif
        for (int u = 0; u < UNROLL; ++u) {
            best[u] = vload(x + lo + u * VW);
#if IS_ARG
            at[u] = iota + (int32_t)(lo + u * VW);
#endif
        }
        for (j = lo + STEP; j + STEP <= hi; j += STEP)
            for (int u = 0; u < UNROLL; ++u) {
                const vf v = vload(x + j + u * VW);
#if IS_ARG
                /* Later elements of a lane win only when strictly better (or the first NaN). */
                const vi m = BETTER(v, best[u]) | ((v != v) & (best[u] == best[u]));
                at[u] = visel(m, iota + (int32_t)(j + u * VW), at[u]);
#else
                const vi m = BETTER(v, best[u]) | (v != v);
#endif
                best[u] = vsel(m, v, best[u]);
            }
        for (int u = 0; u < UNROLL; ++u)
            for (int l = 0; l < VW; ++l) {
#if IS_ARG
                acc_add(&a, best[u][l], at[u][l]);
#else
                acc_add(&a, best[u][l], 0);
#endif
            }
    }
    for (; j < hi; ++j) acc_add(&a, x[j], j);
    return a;
#endif
}

/* ---- inner > 1: rows r0..r1 of columns c0..c0+w of one outer slice, vectorised across the columns ---- */

static void columns(const float* restrict x, int64_t red, int64_t inner, int64_t o, int64_t c0, int64_t w,
                    int64_t r0, int64_t r1, acc_t* restrict res)
{
    const float* xo = x + o * red * inner + c0;
    float acc[CB] __attribute__((aligned(64)));
#if OP <= 1
    double total[CB];
    for (int64_t k = 0; k < w; ++k) total[k] = 0.0;
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = min64(rb + RB, r1);
        for (int64_t k = 0; k < w; ++k) acc[k] = 0.0f;
        for (int64_t r = rb; r < re; ++r) {
            const float* xr = xo + r * inner;
            int64_t k = 0;
            for (; k + VW <= w; k += VW) vstore(acc + k, vload(acc + k) + vload(xr + k));
            for (; k < w; ++k) acc[k] += xr[k];
        }
        for (int64_t k = 0; k < w; ++k) total[k] += (double)acc[k];
    }
    for (int64_t k = 0; k < w; ++k) {
        res[k].v = total[k];
        res[k].i = 0;
    }
#else
#if IS_ARG
    int32_t at[CB] __attribute__((aligned(64)));
#endif
    /* Start from row r0 itself, then later rows win only when strictly better (or the first NaN). */
    for (int64_t k = 0; k < w; ++k) {
        acc[k] = xo[r0 * inner + k];
#if IS_ARG
        at[k] = (int32_t)r0;
#endif
    }
    for (int64_t r = r0 + 1; r < r1; ++r) {
        const float* xr = xo + r * inner;
        int64_t k = 0;
        for (; k + VW <= w; k += VW) {
            const vf v = vload(xr + k), b = vload(acc + k);
#if IS_ARG
            const vi m = BETTER(v, b) | ((v != v) & (b == b));
            vi ia;
            memcpy(&ia, at + k, sizeof ia);
            ia = visel(m, ((vi){0} + (int32_t)r), ia);
            memcpy(at + k, &ia, sizeof ia);
#else
            const vi m = BETTER(v, b) | (v != v);
#endif
            vstore(acc + k, vsel(m, v, b));
        }
        for (; k < w; ++k) {
            const float v = xr[k];
#if IS_ARG
            if (BETTER(v, acc[k]) || (v != v && acc[k] == acc[k])) {
                acc[k] = v;
                at[k] = (int32_t)r;
            }
#else
            if (BETTER(v, acc[k]) || v != v) acc[k] = v;
#endif
        }
    }
    for (int64_t k = 0; k < w; ++k) {
        res[k].v = acc[k];
#if IS_ARG
        res[k].i = at[k];
#else
        res[k].i = 0;
#endif
    }
#endif
}

void reduce(const float* restrict x, void* restrict out, int64_t outer, int64_t red, int64_t inner)
{
    if (inner == 1) {
#if SPLIT
        const int64_t nch = (red + CHUNK - 1) / CHUNK, tasks = outer * nch;
        acc_t* part = (acc_t*)malloc(sizeof(acc_t) * (size_t)tasks);
        #pragma omp parallel if (PARALLEL)
        {
            #pragma omp for schedule(static)
            for (int64_t t = 0; t < tasks; ++t) {
                const int64_t lo = (t % nch) * CHUNK;
                part[t] = span(x + (t / nch) * red, lo, min64(lo + CHUNK, red));
            }
            #pragma omp for schedule(static)
            for (int64_t o = 0; o < outer; ++o) {
                acc_t a = part[o * nch];
                for (int64_t c = 1; c < nch; ++c) acc_merge(&a, part[o * nch + c]);
                store(out, o, a, red);
            }
        }
        free(part);
#else
        #pragma omp parallel for schedule(static) if (PARALLEL && outer > 1)
        for (int64_t o = 0; o < outer; ++o) store(out, o, span(x + o * red, 0, red), red);
#endif
        return;
    }
    const int64_t ncb = (inner + CB - 1) / CB;
#if SPLIT
    int64_t rows_per_task = CHUNK / (inner < CB ? inner : CB);
    if (rows_per_task < 1) rows_per_task = 1;
#else
    const int64_t rows_per_task = red;
#endif
    const int64_t nrc = (red + rows_per_task - 1) / rows_per_task;
    const int64_t tasks = outer * ncb * nrc;
    /* One partial per (row chunk, output) when the reduced dim is split; results go straight out otherwise. */
    acc_t* part = nrc > 1 ? (acc_t*)malloc(sizeof(acc_t) * (size_t)(nrc * outer * inner)) : NULL;
    #pragma omp parallel if (PARALLEL && tasks > 1)
    {
        acc_t res[CB];
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t rc = t % nrc, cb = (t / nrc) % ncb, o = t / (nrc * ncb);
            const int64_t c0 = cb * CB, w = min64(CB, inner - c0);
            const int64_t r0 = rc * rows_per_task, r1 = min64(r0 + rows_per_task, red);
            columns(x, red, inner, o, c0, w, r0, r1, res);
            if (part) {
                acc_t* p = part + (rc * outer + o) * inner + c0;
                for (int64_t k = 0; k < w; ++k) p[k] = res[k];
            } else {
                for (int64_t k = 0; k < w; ++k) store(out, o * inner + c0 + k, res[k], red);
            }
        }
        if (part) {
            #pragma omp for schedule(static)
            for (int64_t n = 0; n < outer * inner; ++n) {
                acc_t a = part[n];
                for (int64_t rc = 1; rc < nrc; ++rc) acc_merge(&a, part[rc * outer * inner + n]);
                store(out, n, a, red);
            }
        }
    }
    free(part);
}
"""

REDUCE_CPU_PY = r'''"""Builtin candidate `reduce_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@ABOUT@
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_reduce = _bind().reduce
_F32 = torch.float32
OP = "@OP@"
DIMS = @DIMS@  # as the reference names them (None: every dim)
KEEPDIM = @KEEPDIM@
_OUT_DTYPE = torch.int64 if OP in ("argmax", "argmin") else torch.float32
@LAYOUT@

class ModelNew(nn.Module):
    """Same constructor arguments as the problem's Model; the dims they choose were read when this file was
    written (they are DIMS and KEEPDIM above), so the arguments are accepted and not needed."""

    def __init__(self, *init_args: object, **init_kwargs: object):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Kept lean on purpose: each torch or ctypes call costs microseconds when the caches are cold.
        if x.dtype != _F32 or not x.is_cpu:
            raise TypeError(f"x must be a float32 CPU tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        outer, red, inner, out_shape = _layout(x.shape)
        out = torch.empty(out_shape, dtype=_OUT_DTYPE)
        if outer * inner == 0:
            return out
        if red == 0:
            if OP not in ("sum", "mean"):
                raise ValueError(f"{OP} of an empty dim")
            return out.fill_(0.0 if OP == "sum" else float("nan"))
        if red >= 2**31:
            raise ValueError(f"a reduced dim of {red} elements: the kernel indexes it with 32-bit integers")
        _reduce(x.data_ptr(), out.data_ptr(), outer, red, inner)
        return out
'''


def render_reduce_cpu(params: dict[str, Any], summary: str) -> str:
    op = params.get("op") or "sum"
    spec = _spec(params)
    c_src = fill(
        REDUCE_C,
        SUMMARY_C=wrap(summary, "   "),
        OP=OP_CODES[op],
        VW=params["vec"],
        UNROLL=params["unroll"],
        PARALLEL=c_bool(params["parallel"] != "none"),
        SPLIT=c_bool(params["parallel"] == "split"),
        CHUNK=params["chunk"],
        CB=params["cols_block"],
        PRELUDE=C_PRELUDE,
    )
    return fill(
        REDUCE_CPU_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        ABOUT=_about(params, "CPU"),
        KEEPDIM=repr(bool(spec.get("keepdim", False))),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"]),
        BINDING=binding_block("reduce_cpu", {"reduce": ("ppiii", "")}, params["binding"]),
        OP=op,
        DIMS=repr(spec.get("dims")),
        LAYOUT=LAYOUT_PY,
    )


# ---------------------------------------------------------------------------------- RMSNorm, CUDA

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

__device__ __forceinline__ float sq4(float4 v) { return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w); }

// 1 / sqrt(mean of squares + eps), the factor torch's x / sqrt(mean(x^2) + eps) divides by.
__device__ __forceinline__ float inv_rms(float sumsq, long long n, float eps)
{
    return 1.0f / sqrtf(sumsq / (float)n + eps);
}
"""

RMS_ROWS_CU = r"""
// RMSNorm over a contiguous (last) run of dims: y = x / sqrt(mean(x^2) + eps) [* weight].
@SUMMARY_C@
#ifndef BLOCK
#define BLOCK @BLOCK@      // threads per block
#endif
#ifndef TPR
#define TPR @TPR@          // threads per row (32..1024, a power of two): BLOCK / TPR rows per block
#endif
#ifndef VEC
#define VEC @VEC@          // float4 accesses when every row and the weight are 16-byte aligned
#endif
#ifndef ITEMS
#define ITEMS @ITEMS@        // float4s per thread kept in registers when the row fits (0: read it twice)
#endif
#ifndef SPLIT
#define SPLIT @SPLIT@        // blocks per row (> 1: TPR == BLOCK; partial sums of squares, then a second kernel)
#endif
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

__device__ __forceinline__ float sumsq_span(const float* xr, long long lo, long long hi, int t, bool vec)
{
    float s0 = 0.0f, s1 = 0.0f;  // two accumulators: two loads in flight per thread
    long long i = lo;
    if (vec) {
        const long long end = lo + (hi - lo) / 4 * 4;
        for (i = lo + 4LL * t; i + 4LL * TPR < end; i += 8LL * TPR) {
            s0 += sq4(__ldg(reinterpret_cast<const float4*>(xr + i)));
            s1 += sq4(__ldg(reinterpret_cast<const float4*>(xr + i + 4LL * TPR)));
        }
        if (i < end) s0 += sq4(__ldg(reinterpret_cast<const float4*>(xr + i)));
        i = end;
    }
    for (long long k = i + t; k < hi; k += TPR) s1 += xr[k] * xr[k];
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
            s += sq4(r[k]);
        }
        const float inv = inv_rms(group_sum(s), cols, eps);
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
    const float s = group_sum(active ? sumsq_span(xr, 0, cols, t, vec) : 0.0f);
    if (active) scale_span(xr, w, yr, 0, cols, t, vec, inv_rms(s, cols, eps));
}

// Split rows, kernel 1: block (row, j) sums the squares of chunk j of its row into part[row * SPLIT + j].
__device__ __forceinline__ long long chunk_len(long long cols) { return ((cols + SPLIT - 1) / SPLIT + 3) / 4 * 4; }

extern "C" __global__ void __launch_bounds__(BLOCK)
rms_partial(const float* __restrict__ x, float* __restrict__ part, long long cols)
{
    const long long row = blockIdx.x / SPLIT, j = blockIdx.x % SPLIT;
    const long long chunk = chunk_len(cols), lo = min(cols, j * chunk), hi = min(cols, lo + chunk);
    const bool vec = VEC && cols % 4 == 0 && aligned16(x);
    const float s = group_sum(sumsq_span(x + row * cols, lo, hi, threadIdx.x, vec));
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
    scale_span(x + row * cols, w, y + row * cols, lo, hi, threadIdx.x, vec, inv_rms(s, cols, eps));
}
"""

RMS_INNER_CU = r"""
// RMSNorm over a strided dim (e.g. dim 1 of (batch, features, h, w)): BX threads across the inner dim
// (V adjacent columns each, coalesced), BY threads down the normalised dim per column.
@SUMMARY_C@
#ifndef BX
#define BX @BX@           // threads across the inner dim
#endif
#ifndef BY
#define BY @BY@            // threads down the normalised dim, sums merged through shared memory
#endif
#ifndef ITEMS
#define ITEMS @ITEMS@        // values per thread and column kept in registers when the dim fits (0: read twice)
#endif
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
            for (int k = 0; k < V; ++k) s[k] += r[q][k] * r[q][k];
        }
    } else
#endif
    if (active) {
#pragma unroll 4
        for (long long rr = ty; rr < red; rr += BY) {
            float v[V];
            load<V>(xo + rr * inner, v);
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] += v[k] * v[k];
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
    for (int k = 0; k < V; ++k) inv[k] = inv_rms(s[k], red, eps);
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
"""

# The module part every RMSNorm candidate shares: the weight (if the reference has one) at the reference's own
# path, so that the harness copies it by name, and the layout of the normalised dims.
RMS_MODULE_PY = r'''DIMS = @DIMS@  # the normalised dims, as the reference names them
EPS = @EPS@
@LAYOUT@

class ModelNew(nn.Module):
    """Same constructor arguments as the problem's Model; what they choose (eps, the dims, the weight's shape)
    was read when this file was written, so the arguments are accepted and not needed."""

    def __init__(self, *init_args: object, **init_kwargs: object):
        super().__init__()
@WEIGHT_INIT@
'''

RMS_CUDA_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

RMSNorm: y = x / sqrt(mean(x^2 over @DIMS_TEXT@) + eps)@TIMES_WEIGHT@, on float32 CUDA tensors.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
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
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            @LAUNCH@
        return y
'''

_LAUNCH_RMS_ROWS = """if inner != 1:
                raise ValueError(f"this kernel normalises contiguous dims; {tuple(x.shape)} has {inner} after them")
            wp = @WEIGHT_PTR@
            if _SPLIT == 1:
                kernel = _MODULE.get_function("rms_rows")
                grid = ((outer + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK,)
                args = (x.data_ptr(), wp, y.data_ptr(), cupy.int64(outer), cupy.int64(red), cupy.float32(EPS))
                kernel(grid, (_BLOCK,), args)
            else:
                part = torch.empty(outer * _SPLIT, dtype=torch.float32, device=x.device)
                partial = _MODULE.get_function("rms_partial")
                apply = _MODULE.get_function("rms_apply")
                partial((outer * _SPLIT,), (_BLOCK,), (x.data_ptr(), part.data_ptr(), cupy.int64(red)))
                args = (x.data_ptr(), wp, part.data_ptr(), y.data_ptr(), cupy.int64(red), cupy.float32(EPS))
                apply((outer * _SPLIT,), (_BLOCK,), args)"""

_LAUNCH_RMS_INNER = """v = 4 if _VEC and inner % 4 == 0 and x.data_ptr() % 16 == 0 else 1
            kernel = _MODULE.get_function("rms_inner_v4" if v == 4 else "rms_inner_v1")
            grid = (outer * ((inner + _BX * v - 1) // (_BX * v)),)
            args = (x.data_ptr(), y.data_ptr(), cupy.int64(red), cupy.int64(inner), cupy.float32(EPS))
            kernel(grid, (_BX * _BY,), args)"""


def _weight_parts(params: dict[str, Any]) -> tuple[str, str, str]:
    """(constructor lines, the forward's weight expression, words) for the reference's weight, if any.

    The weight sits at the reference's dotted path (e.g. ``norm.weight``: a plain ``nn.Module`` named ``norm``
    holding ``weight``), so ``state_dict`` keys match and the harness copies the reference's values.
    """
    spec = _spec(params)
    path, shape = spec.get("weight"), tuple(spec.get("wshape") or ())
    if not path:
        return "", "None", ""
    parts = path.split(".")
    lines = [
        "        # The reference's weight, at its own path so that the harness copies it by name (nn.RMSNorm's "
        "init: ones).",
    ]
    for i in range(1, len(parts)):
        lines.append(f"        self.{'.'.join(parts[:i])} = nn.Module()")
    lines.append(f"        self.{path} = nn.Parameter(torch.ones({shape!r}))")
    # Parameters are created contiguous and only ever updated in place.
    return "\n".join(lines) + "\n", f"self.{path}.detach()", " * weight"


def _rms_module(params: dict[str, Any]) -> str:
    init, _, _ = _weight_parts(params)
    return fill(
        RMS_MODULE_PY,
        DIMS=repr(_spec(params).get("dims")),
        EPS=repr(float(params.get("eps", 1e-5))),
        LAYOUT=LAYOUT_PY,
        WEIGHT_INIT=init,
    )


def _rms_cuda_py(template: str, params: dict[str, Any], summary: str, cu: str, constants: str, launch: str) -> str:
    _, weight, times = _weight_parts(params)
    # The rows kernel takes the weight's pointer (0: none); the strided template is only used without a weight.
    launch = fill(launch, WEIGHT_PTR="0  # no weight" if weight == "None" else f"{weight}.data_ptr()")
    return fill(
        RMS_CUDA_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        DIMS_TEXT=_dims_text(_spec(params).get("dims")),
        TIMES_WEIGHT=times,
        CUDA_SRC=cu,
        CONSTANTS=constants,
        MODULE=_rms_module(params),
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
        COMMON=RMS_COMMON_CU,
    )
    block, tpr = params["block"], params["tpr"]
    constants = f"_BLOCK, _ROWS_PER_BLOCK, _SPLIT = {block}, {block // tpr}, {params['split']}\n"
    return _rms_cuda_py("rmsnorm_cuda_rows", params, summary, cu, constants, _LAUNCH_RMS_ROWS)


def render_rms_inner(params: dict[str, Any], summary: str) -> str:
    if _spec(params).get("weight"):
        raise ValueError("rmsnorm_cuda_inner normalises without a weight")
    cu = fill(
        RMS_INNER_CU,
        SUMMARY_C=wrap(summary, "// "),
        BX=params["bx"],
        BY=params["by"],
        ITEMS=params["items"],
        COMMON=RMS_COMMON_CU,
    )
    constants = (
        f"_BX, _BY = {params['bx']}, {params['by']}\n"
        f"_VEC = {params['vec4']!r}  # float4 columns when the inner dim is a multiple of 4\n"
    )
    return _rms_cuda_py("rmsnorm_cuda_inner", params, summary, cu, constants, _LAUNCH_RMS_INNER)


# ----------------------------------------------------------------------------------- RMSNorm, CPU

RMS_C = r"""
/* RMSNorm of x viewed as (outer, normalised, inner) over its middle dim: y = x / sqrt(mean(x^2) + eps) [* w].
@SUMMARY_C@ */
#ifndef VW
#define VW @VW@            /* floats per vector */
#endif
#ifndef UNROLL
#define UNROLL @UNROLL@        /* independent vector accumulators along a row */
#endif
#ifndef PARALLEL
#define PARALLEL @PARALLEL@      /* OpenMP over rows (inner == 1) or over (slice, column block) tasks */
#endif
#ifndef CB
#define CB @CB@          /* inner > 1: columns per task, their sums kept in L1 */
#endif
@PRELUDE@
/* Sums of squares: float vectors over sub-blocks of SB elements (RB rows when strided), folded into doubles. */
#define SB (STEP * 16)
#define RB 64

static float sumsq_of(const float* restrict x, int64_t lo, int64_t hi)
{
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) {
            const vf v = vload(x + j + u * VW);
            acc[u] += v * v;
        }
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) s += x[j] * x[j];
    return s;
}

/* 1 / sqrt(mean of squares + eps): the mean rounded to fp32 first, as torch's fp32 mean is. */
static inline float inv_rms(double sumsq, int64_t n, float eps)
{
    return 1.0f / __builtin_sqrtf((float)(sumsq / (double)n) + eps);
}

static void scale_row(const float* restrict x, const float* restrict w, float* restrict y, int64_t n, float inv)
{
    const vf iv = vsplat(inv);
    int64_t j = 0;
    if (w) {
        for (; j + STEP <= n; j += STEP)
            for (int u = 0; u < UNROLL; ++u) {
                const int64_t k = j + u * VW;
                vstore(y + k, vload(x + k) * iv * vload(w + k));
            }
        for (; j < n; ++j) y[j] = x[j] * inv * w[j];
    } else {
        for (; j + STEP <= n; j += STEP)
            for (int u = 0; u < UNROLL; ++u) vstore(y + j + u * VW, vload(x + j + u * VW) * iv);
        for (; j < n; ++j) y[j] = x[j] * inv;
    }
}

/* Columns c0..c0+w of slice o: sums of squares down the normalised dim (rows read as contiguous runs of w
   floats), then a second pass scales them; the slice's block (red x w floats) is still in L2 by then. */
static void columns(const float* restrict x, float* restrict y, int64_t red, int64_t inner, int64_t o, int64_t c0,
                    int64_t w, float eps)
{
    const int64_t base = o * red * inner + c0;
    float acc[CB] __attribute__((aligned(64)));
    double total[CB];
    float inv[CB] __attribute__((aligned(64)));
    for (int64_t k = 0; k < w; ++k) total[k] = 0.0;
    for (int64_t rb = 0; rb < red; rb += RB) {
        const int64_t re = min64(rb + RB, red);
        for (int64_t k = 0; k < w; ++k) acc[k] = 0.0f;
        for (int64_t r = rb; r < re; ++r) {
            const float* xr = x + base + r * inner;
            int64_t k = 0;
            for (; k + VW <= w; k += VW) {
                const vf v = vload(xr + k);
                vstore(acc + k, vload(acc + k) + v * v);
            }
            for (; k < w; ++k) acc[k] += xr[k] * xr[k];
        }
        for (int64_t k = 0; k < w; ++k) total[k] += (double)acc[k];
    }
    for (int64_t k = 0; k < w; ++k) inv[k] = inv_rms(total[k], red, eps);
    for (int64_t r = 0; r < red; ++r) {
        const float* xr = x + base + r * inner;
        float* yr = y + base + r * inner;
        int64_t k = 0;
        for (; k + VW <= w; k += VW) vstore(yr + k, vload(xr + k) * vload(inv + k));
        for (; k < w; ++k) yr[k] = xr[k] * inv[k];
    }
}

void rmsnorm(const float* restrict x, const float* restrict w, float* restrict y, int64_t outer, int64_t red,
             int64_t inner, float eps)
{
    if (inner == 1) {
        #pragma omp parallel for schedule(static) if (PARALLEL && outer > 1)
        for (int64_t o = 0; o < outer; ++o) {
            const float* xr = x + o * red;
            double s = 0.0;
            for (int64_t b = 0; b < red; b += SB) s += (double)sumsq_of(xr, b, min64(b + SB, red));
            scale_row(xr, w, y + o * red, red, inv_rms(s, red, eps));
        }
        return;
    }
    const int64_t ncb = (inner + CB - 1) / CB, tasks = outer * ncb;
    #pragma omp parallel for schedule(static) if (PARALLEL && tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) {
        const int64_t c0 = (t % ncb) * CB;
        columns(x, y, red, inner, t / ncb, c0, min64(CB, inner - c0), eps);
    }
}
"""

RMS_CPU_PY = r'''"""Builtin candidate `rmsnorm_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

RMSNorm: y = x / sqrt(mean(x^2 over @DIMS_TEXT@) + eps)@TIMES_WEIGHT@, on float32 CPU tensors.
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_rmsnorm = _bind().rmsnorm
_F32 = torch.float32
KEEPDIM = True
@MODULE@
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Kept lean on purpose: each torch or ctypes call costs microseconds when the caches are cold.
        if x.dtype != _F32 or not x.is_cpu:
            raise TypeError(f"x must be a float32 CPU tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        outer, red, inner, _ = _layout(x.shape)
        w = @WEIGHT@
        y = torch.empty_like(x)
        if x.numel():
            _rmsnorm(x.data_ptr(), w.data_ptr() if w is not None else 0, y.data_ptr(), outer, red, inner, EPS)
        return y
'''


def render_rms_cpu(params: dict[str, Any], summary: str) -> str:
    _, weight, times = _weight_parts(params)
    c_src = fill(
        RMS_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        UNROLL=params["unroll"],
        PARALLEL=c_bool(params["threads"] == "all"),
        CB=params["cols_block"],
        PRELUDE=C_PRELUDE,
    )
    return fill(
        RMS_CPU_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        DIMS_TEXT=_dims_text(_spec(params).get("dims")),
        TIMES_WEIGHT=times,
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"]),
        BINDING=binding_block("rmsnorm_cpu", {"rmsnorm": ("ppiiiif", "")}, params["binding"]),
        MODULE=_rms_module(params),
        WEIGHT=weight,
    )


RENDERERS = {
    "reduce_cuda_rows": render_reduce_rows,
    "reduce_cuda_inner": render_reduce_inner,
    "reduce_cpu": render_reduce_cpu,
    "rmsnorm_cuda_rows": render_rms_rows,
    "rmsnorm_cuda_inner": render_rms_inner,
    "rmsnorm_cpu": render_rms_cpu,
}
