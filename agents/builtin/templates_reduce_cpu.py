"""Reductions over one dim on the CPU (C through gcc): ``reduce_cpu``, OpenMP over rows, column blocks or
chunks of the reduced dim, with the argmax / argmin / NaN rules of ``templates_reduce_cuda``."""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block
from agents.builtin.templates_reduce_python import LAYOUT_PY, OP_CODES, about, params_text, spec_of

REDUCE_C = c_params(r"""
/* Reduction of x viewed as (outer, reduced, inner) over its middle dim.
@SUMMARY_C@ */
#param OP            /* 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin */
#param VW            /* floats per vector */
#param UNROLL        /* independent vector accumulators along a row */
#param PARALLEL      /* OpenMP at all */
#param SPLIT         /* 1: the reduced dim is cut into tasks too, partials merged in order */
#param CHUNK      /* elements of the reduced data per task when SPLIT */
#param CB          /* inner > 1: columns per task, their accumulators kept in L1 */
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
""")

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
    spec = spec_of(params)
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
        PARAMS=params_text(params),
        ABOUT=about(params, "CPU"),
        KEEPDIM=repr(bool(spec.get("keepdim", False))),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"], ("functools",)),
        BINDING=binding_block("reduce_cpu", {"reduce": ("ppiii", "")}, params["binding"]),
        OP=op,
        DIMS=repr(spec.get("dims")),
        LAYOUT=LAYOUT_PY,
    )
