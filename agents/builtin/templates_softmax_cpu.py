"""The CPU softmax / log-softmax template (``softmax_cpu``): C rows over OpenMP threads, built on the
shared prelude and binding of ``templates_cpu``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block

SOFTMAX_C = c_params(r"""
/* Row softmax over the last dim.
@SUMMARY_C@ */
#param VW            /* floats per vector */
#param UNROLL        /* independent vector accumulators */
#param PARALLEL      /* OpenMP over rows */
#param RPT           /* rows per OpenMP task (0: one contiguous range per thread) */
#ifndef ALGO
#define ALGO @ALGO@          /* 0: max, exp+sum, scale; 1: online max/sum by blocks, exp stored, rescale;
                              2: online max/sum without storing, then y = exp(x - max) / sum written once */
#endif
#param STREAM        /* ALGO 2: non-temporal stores for y (no read-for-ownership of y's lines) */
#param PREFETCH      /* prefetch the row this many rows ahead during the exp pass (0: off) */
#ifndef LOG
#define LOG @LOG@           /* 1: log-softmax, y = (x - max) - log(sum); ALGO 0: max pass, sum pass, write pass;
                              ALGO 1 and 2: online max/sum by blocks, then the write pass (no exp stored) */
#endif
@PRELUDE@
/* y[lo:hi] = exp(x[lo:hi] - m); returns the sum. With pf set, also prefetches the same span of the
   row PREFETCH rows ahead (pf: its x, pf_y: its y), so that memory works while this row computes. */
static float exp_store_sum(const float* restrict x, float* restrict y, int64_t lo, int64_t hi, float m,
                           const float* pf, float* pf_y)
{
    const vf mv = vsplat(m);
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP) {
        if (pf)
            for (int u = 0; u < UNROLL; ++u) {
                __builtin_prefetch(pf + j + u * VW, 0, 3);
                __builtin_prefetch(pf_y + j + u * VW, 1, 3);
            }
        for (int u = 0; u < UNROLL; ++u) {
            const vf e = vexp(vload(x + j + u * VW) - mv);
            vstore(y + j + u * VW, e);
            acc[u] += e;
        }
    }
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) {
        const float e = sexp(x[j] - m);
        y[j] = e;
        s += e;
    }
    return s;
}

static float max_of(const float* restrict x, int64_t lo, int64_t hi)
{
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(-FLT_MAX);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) acc[u] = vmax(acc[u], vload(x + j + u * VW));
    for (int u = 1; u < UNROLL; ++u) acc[0] = vmax(acc[0], acc[u]);
    float m = hmax(acc[0]);
    for (; j < hi; ++j) m = x[j] > m ? x[j] : m;
    return m;
}

static void scale(float* restrict y, int64_t lo, int64_t hi, float f)
{
    const vf fv = vsplat(f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) vstore(y + j + u * VW, vload(y + j + u * VW) * fv);
    for (; j < hi; ++j) y[j] *= f;
}

#define MAX_BLOCKS 1024

/* Blocks of at most MAX_BLOCKS per row, each a multiple of STEP and small enough to stay in L1. */
static inline int64_t block_len(int64_t cols)
{
    int64_t blk = STEP * 8;
    if (cols > blk * MAX_BLOCKS) blk = (cols / MAX_BLOCKS + STEP) / STEP * STEP;
    return blk;
}

#if STREAM && VW == 16 && defined(__AVX512F__)
#include <immintrin.h>
static inline void vstream(float* p, vf v) { _mm512_stream_ps(p, (__m512)v); }
static inline void stream_fence(void) { _mm_sfence(); }
#elif STREAM && VW == 8 && defined(__AVX__)
#include <immintrin.h>
static inline void vstream(float* p, vf v) { _mm256_stream_ps(p, (__m256)v); }
static inline void stream_fence(void) { _mm_sfence(); }
#else
static inline void vstream(float* p, vf v) { vstore(p, v); }
static inline void stream_fence(void) {}
#endif

/* y = exp(x - m) * inv over the row; the vector stores are aligned to a whole vector (streaming
   stores need it), with a scalar head and tail. */
static void exp_scale_store(const float* restrict x, float* restrict y, int64_t cols, float m, float inv,
                            const float* pf, float* pf_y)
{
    const vf mv = vsplat(m), iv = vsplat(inv);
    int64_t j = 0;
    while (j < cols && ((uintptr_t)(y + j) & (VW * 4 - 1)) != 0) {
        y[j] = sexp(x[j] - m) * inv;
        ++j;
    }
    for (; j + STEP <= cols; j += STEP) {
        if (pf)
            for (int u = 0; u < UNROLL; ++u) {
                __builtin_prefetch(pf + j + u * VW, 0, 3);
                __builtin_prefetch(pf_y + j + u * VW, 1, 3);
            }
        for (int u = 0; u < UNROLL; ++u) vstream(y + j + u * VW, vexp(vload(x + j + u * VW) - mv) * iv);
    }
    for (; j < cols; ++j) y[j] = sexp(x[j] - m) * inv;
    stream_fence();  /* streaming stores are weakly ordered: publish them before the threads join */
}

/* Running (max, sum of exp(x - max)) over x[lo:hi), merged into (*m, *s). */
static void online_block(const float* restrict x, int64_t lo, int64_t hi, float* m, float* s)
{
    const float bm = max_of(x, lo, hi);
    if (bm > *m) {
        *s *= sexp(*m - bm);
        *m = bm;
    }
    const vf mv = vsplat(*m);
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) acc[u] += vexp(vload(x + j + u * VW) - mv);
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float t = hsum(acc[0]);
    for (; j < hi; ++j) t += sexp(x[j] - *m);
    *s += t;
}

#if LOG
/* The sum of exp(x - m) over x[lo:hi). */
static float sum_exp(const float* restrict x, int64_t lo, int64_t hi, float m)
{
    const vf mv = vsplat(m);
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) acc[u] += vexp(vload(x + j + u * VW) - mv);
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) s += sexp(x[j] - m);
    return s;
}

/* y = (x - m) - ls over the row (ls = log of the sum), with the same prefetch and stores as exp_scale_store. */
static void log_store(const float* restrict x, float* restrict y, int64_t cols, float m, float ls, const float* pf,
                      float* pf_y)
{
    const vf mv = vsplat(m), lv = vsplat(ls);
    int64_t j = 0;
    while (j < cols && ((uintptr_t)(y + j) & (VW * 4 - 1)) != 0) {
        y[j] = (x[j] - m) - ls;
        ++j;
    }
    for (; j + STEP <= cols; j += STEP) {
        if (pf)
            for (int u = 0; u < UNROLL; ++u) {
                __builtin_prefetch(pf + j + u * VW, 0, 3);
                __builtin_prefetch(pf_y + j + u * VW, 1, 3);
            }
        for (int u = 0; u < UNROLL; ++u) vstream(y + j + u * VW, (vload(x + j + u * VW) - mv) - lv);
    }
    for (; j < cols; ++j) y[j] = (x[j] - m) - ls;
    stream_fence();
}
#endif

static void softmax_row(const float* restrict x, float* restrict y, int64_t cols, const float* pf, float* pf_y)
{
#if LOG
    float m = -FLT_MAX, s = 0.0f;
#if ALGO == 0
    m = max_of(x, 0, cols);
    s = sum_exp(x, 0, cols, m);
#else
    const int64_t blk = block_len(cols);
    for (int64_t lo = 0; lo < cols; lo += blk) online_block(x, lo, min64(lo + blk, cols), &m, &s);
#endif
    log_store(x, y, cols, m, __builtin_logf(s), pf, pf_y);
#elif ALGO == 1
    /* One block at a time: its max (from L1 right after), then exp against the running max, stored.
       When the running max grows the running sum is rescaled; a last pass rescales each block. */
    const int64_t blk = block_len(cols);
    float block_max[MAX_BLOCKS];
    float m = -FLT_MAX, s = 0.0f;
    int64_t nb = 0;
    for (int64_t lo = 0; lo < cols; lo += blk, ++nb) {
        const int64_t hi = min64(lo + blk, cols);
        const float bm = max_of(x, lo, hi);
        if (bm > m) {
            s *= sexp(m - bm);
            m = bm;
        }
        block_max[nb] = m;
        s += exp_store_sum(x, y, lo, hi, m, pf, pf_y);
    }
    const float inv = 1.0f / s;
    nb = 0;
    for (int64_t lo = 0; lo < cols; lo += blk, ++nb) scale(y, lo, min64(lo + blk, cols), sexp(block_max[nb] - m) * inv);
#elif ALGO == 2
    /* Pass 1 reads x once from memory (each block twice from L1); pass 2 re-reads the row from L1/L2
       and writes y once: two exps per element, but no traffic on y besides the final write. */
    const int64_t blk = block_len(cols);
    float m = -FLT_MAX, s = 0.0f;
    for (int64_t lo = 0; lo < cols; lo += blk) online_block(x, lo, min64(lo + blk, cols), &m, &s);
    exp_scale_store(x, y, cols, m, 1.0f / s, pf, pf_y);
#else
    const float m = max_of(x, 0, cols);
    const float s = exp_store_sum(x, y, 0, cols, m, pf, pf_y);
    scale(y, 0, cols, 1.0f / s);
#endif
}

void softmax_rows(const float* restrict x, float* restrict y, int64_t rows, int64_t cols)
{
#if RPT > 0
    #pragma omp parallel for schedule(static, RPT) if (PARALLEL && rows > 1)
#else
    #pragma omp parallel for schedule(static) if (PARALLEL && rows > 1)
#endif
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t next = r + PREFETCH;
        const int ahead = PREFETCH > 0 && next < rows;
        softmax_row(x + r * cols, y + r * cols, cols, ahead ? x + next * cols : 0, ahead ? y + next * cols : 0);
    }
}
""")

SOFTMAX_PY = r'''"""Builtin candidate `softmax_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@WHAT_TITLE@ over the last dim (dim 1 of the problem's 2-D input), any number of
rows and columns; exp is a vectorised Cephes polynomial (~2 ulp).
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_softmax = _bind().softmax_rows
_F32 = torch.float32


class ModelNew(nn.Module):
    """@WHAT@(x, dim=-1); no constructor arguments, like the problem's Model."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Kept lean on purpose: each torch or ctypes call costs microseconds when the caches are cold.
        if x.dtype != _F32 or not x.is_cpu:
            raise TypeError(f"x must be a float32 CPU tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1] if x.dim() else 1
        if cols:
            _softmax(x.data_ptr(), y.data_ptr(), x.numel() // cols, cols)
        return y
'''


def render_softmax(params: dict[str, Any], summary: str) -> str:
    c_src = fill(
        SOFTMAX_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        UNROLL=params["unroll"],
        PARALLEL=c_bool(params["parallel"]),
        RPT=params["rows_per_task"],
        ALGO={"three_pass": 0, "online_store": 1, "online_recompute": 2}[params["algorithm"]],
        STREAM=c_bool(params["stream"]),
        PREFETCH=params["prefetch"],
        LOG=c_bool(params.get("op") == "log_softmax"),
        PRELUDE=C_PRELUDE,
    )
    binding = binding_block("softmax_cpu", {"softmax_rows": ("ppii", "")}, params["binding"])
    what = "log_softmax" if params.get("op") == "log_softmax" else "softmax"
    return fill(
        SOFTMAX_PY,
        WHAT=what,
        WHAT_TITLE=what.capitalize(),
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"]),
        BINDING=binding,
    )


__all__ = ["render_softmax"]
