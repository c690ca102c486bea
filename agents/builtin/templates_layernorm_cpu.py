"""The CPU LayerNorm template (``layernorm_cpu``): C rows (or long rows split) over OpenMP threads, built on
the shared prelude and binding of ``templates_cpu``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block

LAYERNORM_C = c_params(r"""
/* LayerNorm over the trailing cols elements of each row.
@SUMMARY_C@ */
#param VW            /* floats per vector */
#param UNROLL        /* independent vector accumulators */
#param PARALLEL      /* OpenMP at all */
#param SPLIT         /* 1: OpenMP over (row, chunk) tasks, statistics merged per row; 0: over rows */
#param CHUNK      /* elements per task when SPLIT */
#param WELFORD       /* 1: one pass, block statistics merged (Chan); 0: mean pass, then variance pass */
@PRELUDE@
/* Partial sums are taken in float vectors over sub-blocks of SB elements and folded into doubles. */
#define SB (STEP * 16)

typedef struct { double n, mean, m2; } stats_t;  /* count, mean, sum of squared deviations */

static inline void merge(stats_t* a, stats_t b)
{
    const double n = a->n + b.n;
    if (b.n == 0.0) return;
    const double d = b.mean - a->mean;
    a->mean += d * (b.n / n);
    a->m2 += b.m2 + d * d * (a->n * b.n / n);
    a->n = n;
}

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

static float sqdev_of(const float* restrict x, int64_t lo, int64_t hi, float mean)
{
    const vf mv = vsplat(mean);
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) {
            const vf d = vload(x + j + u * VW) - mv;
            acc[u] += d * d;
        }
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) s += (x[j] - mean) * (x[j] - mean);
    return s;
}

/* Statistics of x[lo:hi) in one pass over memory: each sub-block (in L1) gives its own mean and M2. */
static stats_t stats_welford(const float* restrict x, int64_t lo, int64_t hi)
{
    stats_t st = {0.0, 0.0, 0.0};
    for (int64_t b = lo; b < hi; b += SB) {
        const int64_t e = min64(b + SB, hi);
        const float mean = sum_of(x, b, e) / (float)(e - b);
        const stats_t part = {(double)(e - b), (double)mean, (double)sqdev_of(x, b, e, mean)};
        merge(&st, part);
    }
    return st;
}

static double sum_blocked(const float* restrict x, int64_t lo, int64_t hi)
{
    double s = 0.0;
    for (int64_t b = lo; b < hi; b += SB) s += sum_of(x, b, min64(b + SB, hi));
    return s;
}

static double sqdev_blocked(const float* restrict x, int64_t lo, int64_t hi, float mean)
{
    double s = 0.0;
    for (int64_t b = lo; b < hi; b += SB) s += sqdev_of(x, b, min64(b + SB, hi), mean);
    return s;
}

static void normalise(const float* restrict x, const float* restrict w, const float* restrict bias,
                      float* restrict y, int64_t lo, int64_t hi, float mean, float rstd)
{
    const vf mv = vsplat(mean), rv = vsplat(rstd);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t k = j + u * VW;
            vstore(y + k, (vload(x + k) - mv) * rv * vload(w + k) + vload(bias + k));
        }
    for (; j < hi; ++j) y[j] = (x[j] - mean) * rstd * w[j] + bias[j];
}

static inline float rstd_of(double m2, int64_t cols, float eps)
{
    return (float)(1.0 / __builtin_sqrt(m2 / (double)cols + (double)eps));  /* biased variance */
}

void layernorm(const float* restrict x, const float* restrict w, const float* restrict bias, float* restrict y,
               int64_t rows, int64_t cols, float eps)
{
#if SPLIT
    const int64_t nch = (cols + CHUNK - 1) / CHUNK;
    const int64_t tasks = rows * nch;
    stats_t* part = (stats_t*)malloc(sizeof(stats_t) * (size_t)tasks);
    float* row_stats = (float*)malloc(sizeof(float) * 2 * (size_t)rows);
    #pragma omp parallel if (PARALLEL)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; ++t) {
            const float* xr = x + (t / nch) * cols;
            const int64_t lo = (t % nch) * CHUNK, hi = min64(lo + CHUNK, cols);
#if WELFORD
            part[t] = stats_welford(xr, lo, hi);
#else
            part[t].n = (double)(hi - lo);
            part[t].mean = sum_blocked(xr, lo, hi);  /* a sum, for now */
#endif
        }
#if WELFORD
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            stats_t st = part[r * nch];
            for (int64_t c = 1; c < nch; ++c) merge(&st, part[r * nch + c]);
            row_stats[2 * r] = (float)st.mean;
            row_stats[2 * r + 1] = rstd_of(st.m2, cols, eps);
        }
#else
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0.0;
            for (int64_t c = 0; c < nch; ++c) s += part[r * nch + c].mean;
            row_stats[2 * r] = (float)(s / (double)cols);
        }
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t r = t / nch, lo = (t % nch) * CHUNK, hi = min64(lo + CHUNK, cols);
            part[t].m2 = sqdev_blocked(x + r * cols, lo, hi, row_stats[2 * r]);
        }
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            double m2 = 0.0;
            for (int64_t c = 0; c < nch; ++c) m2 += part[r * nch + c].m2;
            row_stats[2 * r + 1] = rstd_of(m2, cols, eps);
        }
#endif
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t r = t / nch, lo = (t % nch) * CHUNK, hi = min64(lo + CHUNK, cols);
            normalise(x + r * cols, w, bias, y + r * cols, lo, hi, row_stats[2 * r], row_stats[2 * r + 1]);
        }
    }
    free(part);
    free(row_stats);
#else
    #pragma omp parallel for schedule(static) if (PARALLEL && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
#if WELFORD
        const stats_t st = stats_welford(xr, 0, cols);
        const float mean = (float)st.mean;
        const double m2 = st.m2;
#else
        const float mean = (float)(sum_blocked(xr, 0, cols) / (double)cols);
        const double m2 = sqdev_blocked(xr, 0, cols, mean);
#endif
        normalise(xr, w, bias, y + r * cols, 0, cols, mean, rstd_of(m2, cols, eps));
    }
#endif
}
""")

LAYERNORM_PY = r'''"""Builtin candidate `layernorm_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

A row is the trailing prod(normalized_shape) elements;
y = (x - mean) / sqrt(var + eps) * weight + bias with the biased variance, like nn.LayerNorm.
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_layernorm = _bind().layernorm
_F32 = torch.float32
EPS = @EPS@


@LAYERNORM_MODULE@
        self.k = len(self.normalized_shape)
        self.cols = math.prod(self.normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Kept lean on purpose: each torch or ctypes call costs microseconds when the caches are cold.
        if x.dtype != _F32 or not x.is_cpu:
            raise TypeError(f"x must be a float32 CPU tensor, got {x.dtype} on {x.device}")
        if x.shape[-self.k :] != self.normalized_shape:
            raise ValueError(f"input {tuple(x.shape)} does not end in {self.normalized_shape}")
        x = x.contiguous()
        y = torch.empty_like(x)
        ln = self.ln  # its parameters are contiguous: created so, and only ever updated in place
        rows = x.numel() // self.cols if self.cols else 0
        if rows:
            _layernorm(x.data_ptr(), ln.weight.data_ptr(), ln.bias.data_ptr(), y.data_ptr(), rows, self.cols, EPS)
        return y
'''


def render_layernorm(params: dict[str, Any], summary: str) -> str:
    c_src = fill(
        LAYERNORM_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        UNROLL=params["unroll"],
        PARALLEL=c_bool(params["parallel"] != "none"),
        SPLIT=c_bool(params["parallel"] == "split"),
        CHUNK=params["chunk"],
        WELFORD=c_bool(params["stats"] == "welford"),
        PRELUDE=C_PRELUDE,
    )
    return fill(
        LAYERNORM_PY,
        LAYERNORM_MODULE=LAYERNORM_MODULE,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"], ("math",)),
        BINDING=binding_block("layernorm_cpu", {"layernorm": ("ppppiif", "")}, params["binding"]),
        EPS=repr(float(params.get("eps", 1e-5))),
    )


__all__ = ["render_layernorm"]
