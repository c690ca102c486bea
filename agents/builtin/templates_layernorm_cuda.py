"""``layernorm_cuda_wide``: LayerNorm for a few very long rows in two kernels that move the fewest bytes
without holding a row on chip.

Kernel 1 reads x once for the statistics (``split`` blocks per row, shifted sums, ``unroll`` float4 loads in
flight per thread). Kernel 2 tiles the columns: a block loads its tile of the weight and bias once into
registers and normalises that tile for a group of ``rows_per_block`` rows, so the weight and bias cross the
memory system once per group instead of once per row (the split kernel of ``templates_cuda`` reads them once
per row: 512 MiB of extra L2 traffic on the (16, 64, 256, 256) problem). ``tail_first`` walks each group's
rows last to first: kernel 1 read the last rows most recently, so they are the ones still in L2 (no gain
measurable on the H200: bench/RESULTS.md). On that problem the two kernels move 800 MiB at 88% of the copy
ceiling; going further needs x read once.

The kernel source is one raw string literal whose ``#ifndef`` defaults are the chosen parameters, like
``templates_cuda``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_cuda import LAYERNORM_COMMON, layernorm_candidate

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
