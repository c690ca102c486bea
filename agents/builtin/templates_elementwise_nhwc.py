"""``epilogue_cuda_half`` with ``layout="nhwc"``: the convolution on channels-last fp16 copies of its operands, then
the tail as a kernel that reads the result in that order and writes the output in the reference's.

cuDNN's tensor-core convolution kernels are written for channels-last order (NHWC); handed the reference's (N, C,
spatial) order they convert around the kernel or run other ones. torch.compile runs the suite's convolutions
channels-last too (Inductor's layout optimisation, ``decide_layout_opt`` in torch/_inductor/graph.py, takes both),
and is 2.4x eager on conv2d_relu_biasadd, where fusing the tail alone saves about an eighth of eager's time (one
pass over the 496 MiB output instead of two; bench/RESULTS.md).

Torch's cast writes the channels-last copies (``cast="torch"``), or, for the input, a kernel of ours
(``cast="kernel"``): torch's cast into another memory format is a general strided copy, ours moves tiles of 32
channels x 64 positions through shared memory, reading runs along the positions and writing runs along the
channels, and rounds to fp16 on the way out. The tail kernel takes the transpose back: a block moves a tile of TC
channels x TP positions (the ``tile`` parameter) of one sample, reading runs along the channels and writing runs
along the positions, and applies the tail on the way out.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_elementwise_expression import Expression, long_chain
from agents.builtin.templates_elementwise_math import BAND_INDEX_CU, COMMON, CUDA_MATH, HALF_CU, index_typed
from agents.builtin.templates_elementwise_python import (
    CONSTANTS_PY,
    DOC_PY,
    MODEL_PY,
    Params,
    candidate_fields,
    channels_last,
    prepare,
    py_tuple,
)

NHWC_KERNEL = c_params(r"""
// Pointwise tail from the heavy op's channels-last result h[n][p][c] (p: a position) to y[n][c][p], the reference's
// order: out[i] = ew_apply(h at i, other full operands at i, broadcast operands at (i / inner) % size).
@SUMMARY_C@
#param FAST_MATH     // __expf / __logf / __fdividef instead of the full-precision functions
#param TC           // channels a tile (a multiple of 32): a warp's load is a run of 32 channels of one position
#param TP           // positions a tile (a multiple of 32): a warp's store is a run of 32 positions of one channel
#define THREADS 256
#define TILE_PER (TC * TP / THREADS)  // a thread's elements of a tile
#define LOAD_STEP (2 * THREADS / TC)   // positions between a thread's loads (its pair of channels fixed)
#define STORE_STEP (2 * THREADS / TP)  // channels between its stores (its pair of positions fixed)
static_assert(THREADS % (TC / 2) == 0 && THREADS % (TP / 2) == 0 && TC * TP % (2 * THREADS) == 0,
              "tiles the block's threads divide, in pairs");
@MATH@
@COMMON@
@APPLY@
@BAND_INDEX@

// A broadcast operand's index at output (n, c, p), flat index i: the usual bands (one value a channel, one a
// position) without the integer division band_index pays per element.
template <typename I>
__device__ __forceinline__ I nhwc_band(I i, I c, I p, I C, I P, I inner, I size)
{
    // inner and size are the same for the whole grid: these branches never diverge
    if (size == 1) return (I)0;
    if (inner == P && size == C) return c;  // i = (n * C + c) * P + p
    if (inner == 1 && size == P) return p;
    return band_index<I>(i, inner, size);
}

// A tile of sample n: channels c0.., positions p0.., from h to shared memory. A thread keeps one pair of channels
// and steps along the positions; every load is issued before the first store to the tile, so TILE_PER / 2 are in
// flight, each of both channels at once where C is even (a pair then starts 4-byte aligned).
template <typename I>
__device__ __forceinline__ void load_tile(
    const unsigned short* __restrict__ h, float (*tile)[TP + 1], I n, I c0, I p0, I C, I P)
{
    const int tc = 2 * (threadIdx.x % (TC / 2)), tp = threadIdx.x / (TC / 2);  // a warp reads 64 channels' worth
    const I c = c0 + tc, first = p0 + tp;
    const unsigned short* at = h + (n * P + first) * C + c;
    const bool pairs = C % 2 == 0;  // the same for the whole grid: never diverges
    float v[TILE_PER];  // v[2j], v[2j + 1]: channels c, c + 1 at position first + j * LOAD_STEP
#pragma unroll
    for (int j = 0; j < TILE_PER / 2; ++j) {
        const bool inside = first + j * LOAD_STEP < P;
        const unsigned short* from = at + (I)(j * LOAD_STEP) * C;
        if (pairs) {
            const unsigned int two = inside && c < C ? *reinterpret_cast<const unsigned int*>(from) : 0u;
            v[2 * j] = half_float((unsigned short)(two & 0xffffu));
            v[2 * j + 1] = half_float((unsigned short)(two >> 16));
        } else {
            v[2 * j] = inside && c < C ? half_float(from[0]) : 0.0f;
            v[2 * j + 1] = inside && c + 1 < C ? half_float(from[1]) : 0.0f;
        }
    }
#pragma unroll
    for (int j = 0; j < TILE_PER / 2; ++j) {
        tile[tc][tp + j * LOAD_STEP] = v[2 * j];
        tile[tc + 1][tp + j * LOAD_STEP] = v[2 * j + 1];
    }
}

// The same tile through the tail into y: a thread keeps a pair of positions and steps along the channels; where P
// is even the pair starts 8-byte aligned and goes out as one store.
template <typename I>
__device__ __forceinline__ void store_tile(@STORE_PARAMS@)
{
    const int tp = 2 * (threadIdx.x % (TP / 2)), tc = threadIdx.x / (TP / 2);  // a warp writes 64 positions
    const I p = p0 + tp;
    if (p >= P) return;
    const bool second = p + 1 < P, pairs = P % 2 == 0;  // pairs: the same for the whole grid
#pragma unroll
    for (int j = 0; j < TILE_PER / 2; ++j) {
        const int row = tc + j * STORE_STEP;
        const I c = c0 + row;
        if (c < C) {
            const I first = (n * C + c) * P + p;
            float r[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const I i = first + e, q = p + e;
                r[e] = e == 0 || second ? ew_apply(@CALL@) : 0.0f;
            }
            if (second && pairs) {
                *reinterpret_cast<float2*>(y + first) = make_float2(r[0], r[1]);
            } else {
                y[first] = r[0];
                if (second) y[first + 1] = r[1];
            }
        }
    }
}

template <typename I>
__device__ __forceinline__ void nhwc_body(@PARAMS_T@, float* __restrict__ y, I N, I C, I P)
{
    // +1 column: a warp's loads write down a column of the tile, TP + 1 (odd) floats apart: 32 different banks
    __shared__ float tile[TC][TP + 1];
    const I c0 = (I)blockIdx.y * TC, p0 = (I)blockIdx.x * TP;
    for (I n = blockIdx.z; n < N; n += gridDim.z) {
        load_tile<I>(@HEAVY@, tile, n, c0, p0, C, P);
        __syncthreads();
        store_tile<I>(@STORE_ARGS@);
        __syncthreads();  // the next sample's loads overwrite the tile
    }
}

@ENTRIES@
""")

# The input's cast (``cast="kernel"``): the reverse transpose, fp32 in the reference's order to fp16 channels-last,
# through a fixed tile of (channels, positions) that the kernel and its launch both read from here.
CAST_TILE = (32, 64)
FLOAT_HALF_PTX = 'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));'
CAST_KERNEL = (
    r"""
// The heavy op's input x[n][c][p] (fp32, the reference's order) as fp16 channels-last xh[n][p][c], rounded to
// nearest even: a block moves a tile of CAST_TC channels x CAST_TP positions of a sample through shared memory.
"""
    + f"#define CAST_TC {CAST_TILE[0]}\n#define CAST_TP {CAST_TILE[1]}\n"
    + "#define CAST_PER (CAST_TC * CAST_TP / THREADS)  // a thread's elements of a tile\n"
    + "#define CAST_LOAD_STEP (THREADS / CAST_TP)  // channels between a thread's loads\n"
    + "#define CAST_STORE_STEP (2 * THREADS / CAST_TC)  // positions between its stores (a pair of channels each)\n"
    + 'static_assert(THREADS % CAST_TP == 0 && THREADS % (CAST_TC / 2) == 0, "a tile the block\'s threads divide");\n'
    + r"""
__device__ __forceinline__ unsigned short float_half(float f)
{
    unsigned short h;
    """
    + FLOAT_HALF_PTX
    + r"""
    return h;
}

template <typename I>
__device__ __forceinline__ void cast_body(const float* __restrict__ x, unsigned short* __restrict__ xh, I N, I C, I P)
{
    // +1 column: the stores read down a column of the tile, CAST_TP + 1 (odd) floats apart: 32 different banks
    __shared__ float cast_tile[CAST_TC][CAST_TP + 1];
    const I c0 = (I)blockIdx.y * CAST_TC, p0 = (I)blockIdx.x * CAST_TP;
    const int lp = threadIdx.x % CAST_TP, lc = threadIdx.x / CAST_TP;  // loads: a position, channels stepped
    const int sc = 2 * (threadIdx.x % (CAST_TC / 2)), sp = threadIdx.x / (CAST_TC / 2);  // stores: a channel pair
    const bool pairs = C % 2 == 0;  // then a pair starts 4-byte aligned and goes out as one store
    for (I n = blockIdx.z; n < N; n += gridDim.z) {
        const I p = p0 + lp, c = c0 + sc;
        const float* from = x + (n * C + c0 + lc) * P + p;
        float v[CAST_PER];  // every load issued before the first store to the tile: CAST_PER in flight
#pragma unroll
        for (int j = 0; j < CAST_PER; ++j) {  // a warp reads 32 positions of a channel
            v[j] = p < P && c0 + lc + j * CAST_LOAD_STEP < C ? from[(I)(j * CAST_LOAD_STEP) * P] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < CAST_PER; ++j) {
            cast_tile[lc + j * CAST_LOAD_STEP][lp] = v[j];
        }
        __syncthreads();
        unsigned short* to = xh + (n * P + p0 + sp) * C + c;
#pragma unroll
        for (int j = 0; j < CAST_PER / 2; ++j) {  // and writes 32 channels of each of two positions
            const int q = sp + j * CAST_STORE_STEP;
            if (c < C && p0 + q < P) {
                const unsigned short a = float_half(cast_tile[sc][q]), b = float_half(cast_tile[sc + 1][q]);
                unsigned short* at = to + (I)(j * CAST_STORE_STEP) * C;
                if (pairs) {
                    *reinterpret_cast<unsigned int*>(at) = (unsigned int)a | (unsigned int)b << 16;
                } else {
                    at[0] = a;
                    if (c + 1 < C) at[1] = b;
                }
            }
        }
        __syncthreads();  // the next sample's loads overwrite the tile
    }
}
"""
    + "".join(
        f"""
extern "C" __global__ void __launch_bounds__(THREADS)
to_nhwc_half_{suffix}(const float* __restrict__ x, unsigned short* __restrict__ xh, {ctype} N, {ctype} C, {ctype} P)
{{
    cast_body<{ctype}>(x, xh, N, C, P);
}}
"""
        for suffix, ctype in (("i32", "unsigned int"), ("i64", "long long"))
    )
)

CAST_PY = r'''

def _to_nhwc_half(x: torch.Tensor) -> torch.Tensor:
    """``x`` (batch, channels, spatial...) as an fp16 channels-last copy, by one transposing kernel."""
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float16, device=x.device, memory_format=@MEMORY_FORMAT@)
    n = x.numel()
    if n == 0:
        return out
    batch, channels = x.shape[0], x.shape[1]
    positions = n // (batch * channels)
    wide = n >= 2**31  # 32-bit index math whenever it cannot overflow
    index = cupy.int64 if wide else cupy.uint32
    # Tiles of @CAST_TC@ channels x @CAST_TP@ positions; the grid's third dim loops over the samples.
    grid = (-(-positions // @CAST_TP@), -(-channels // @CAST_TC@), min(batch, 65535))
    args = (x.data_ptr(), out.data_ptr(), index(batch), index(channels), index(positions))
    _run_kernel(_function("to_nhwc_half_i64" if wide else "to_nhwc_half_i32"), x.device, grid, (_THREADS,), args)
    return out
'''

NHWC_PY = (
    DOC_PY
    + r'''
import math

import cupy
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
_TC, _TP, _THREADS = @TC@, @TP@, 256  # the kernel's tile: channels, positions; threads a block
'''
    + CONSTANTS_PY
    + r"""
def _launch(
    n: int, shape: tuple[int, ...], full: tuple[int, ...], bands: tuple[int, ...], y: int, device: torch.device
) -> None:
    # A block a tile of _TC channels x _TP positions of a sample; the grid's third dim loops over the samples.
    batch, channels = shape[0], shape[1]
    positions = n // (batch * channels)
    wide = n >= 2**31  # 32-bit index math whenever it cannot overflow
    index = cupy.int64 if wide else cupy.uint32
    args = (*full, *(index(a) if k % 3 else a for k, a in enumerate(bands)), y)
    args += (index(batch), index(channels), index(positions))
    grid = (-(-positions // _TP), -(-channels // _TC), min(batch, 65535))
    _run_kernel(_function("ew_nhwc_i64" if wide else "ew_nhwc_i32"), device, grid, (_THREADS,), args)
@CAST_PY@
"""
    + MODEL_PY
)


def tile_shape(params: Params) -> tuple[int, int]:
    """(channels, positions) of a point's ``tile``, e.g. "32x64"."""
    tc, tp = params["tile"].split("x")
    return int(tc), int(tp)


def nhwc_kernel(spec: dict[str, Any], params: Params, summary: str) -> str:
    """The CUDA source: the tail of ``spec`` from an fp16 channels-last heavy result to the reference's order."""
    e = Expression(spec)
    apply = e.function("__device__ __noinline__" if long_chain(spec) else "EW_FN")
    heavy = next(k for k, j in enumerate(e.full) if e.leaves[j]["kind"] == "heavy")
    nf, nb = len(e.full), len(e.bands)
    others = [k for k in range(nf) if k != heavy]  # full operands in the reference's order, read at i
    full_t = [f"const {'unsigned short' if k == heavy else 'float'}* __restrict__ f{k}" for k in range(nf)]
    bands_t = [f"const float* __restrict__ b{k}, I inner{k}, I size{k}" for k in range(nb)]
    store_t = [full_t[k] for k in others] + bands_t
    store_t += ["float (*tile)[TP + 1]", "float* __restrict__ y", "I n", "I c0", "I p0", "I C", "I P"]
    values = ["tile[row][tp + e]" if k == heavy else f"f{k}[i]" for k in range(nf)] + [
        f"b{k}[nhwc_band<I>(i, c, q, C, P, inner{k}, size{k})]" for k in range(nb)
    ]
    band_names = [f"b{k}, inner{k}, size{k}" for k in range(nb)]
    store_args = [f"f{k}" for k in others] + band_names + ["tile", "y", "n", "c0", "p0", "C", "P"]
    entries = []
    for suffix, ctype in (("i32", "unsigned int"), ("i64", "long long")):
        sig = index_typed(", ".join(full_t + bands_t), ctype)
        names = ", ".join([f"f{k}" for k in range(nf)] + band_names + ["y", "N", "C", "P"])
        entries.append(
            f'extern "C" __global__ void __launch_bounds__(THREADS)\new_nhwc_{suffix}({sig}, float* __restrict__ y, '
            f"{ctype} N, {ctype} C, {ctype} P)\n{{\n    nhwc_body<{ctype}>({names});\n}}\n"
        )
    tc, tp = tile_shape(params)
    return fill(
        NHWC_KERNEL,
        TC=tc,
        TP=tp,
        SUMMARY_C=wrap(summary, "// "),
        FAST_MATH=c_bool(params["fast_math"]),
        MATH=CUDA_MATH,
        COMMON=COMMON + HALF_CU,
        APPLY=apply,
        BAND_INDEX=BAND_INDEX_CU,
        STORE_PARAMS=", ".join(store_t),
        CALL=", ".join(values),
        PARAMS_T=", ".join(full_t + bands_t),
        HEAVY=f"f{heavy}",
        STORE_ARGS=", ".join(store_args),
        ENTRIES="\n".join(entries),
    )


def render_nhwc(params: Params, summary: str, template: str) -> str:
    """The candidate: the convolution on channels-last fp16 copies, then the transposing tail."""
    spec, _, fw = prepare(params, template, True, "cuda")
    lines, full_ptrs, band_args = fw.lines(params, True, half=True)
    lines.append(
        f"_launch(n, tuple(out.shape), {py_tuple(full_ptrs)}, {py_tuple(band_args)}, out.data_ptr(), out.device)"
    )
    lines.append("return out")
    tc, tp = tile_shape(params)
    own_cast = params["cast"] == "kernel"
    return fill(
        NHWC_PY,
        TC=tc,
        TP=tp,
        CUDA_SRC=nhwc_kernel(spec, params, summary) + (CAST_KERNEL if own_cast else ""),
        CAST_PY=fill(CAST_PY, MEMORY_FORMAT=channels_last(spec), CAST_TC=CAST_TILE[0], CAST_TP=CAST_TILE[1])
        if own_cast
        else "",
        **candidate_fields(params, summary, template, True, fw, lines, half=True),
    )
