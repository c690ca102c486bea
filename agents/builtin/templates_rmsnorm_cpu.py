"""RMSNorm, and L1 / L2 normalisation, on the CPU (C through gcc): ``rmsnorm_cpu``, OpenMP over rows or over
(slice, column block) tasks, sums folded into doubles."""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block
from agents.builtin.templates_reduce_python import formula, norm_code, params_text, rms_module, weight_parts

RMS_C = c_params(r"""
/* RMSNorm (or L1 / L2 normalisation, NORM) of x viewed as (outer, normalised, inner) over its middle dim:
   y = x * factor(s) [* w], s the sum of each element's term over the normalised dim.
@SUMMARY_C@ */
#param VW            /* floats per vector */
#param UNROLL        /* independent vector accumulators along a row */
#param PARALLEL      /* OpenMP over rows (inner == 1) or over (slice, column block) tasks */
#param CB          /* inner > 1: columns per task, their sums kept in L1 */
#param NORM          /* the normalisation: 0 RMSNorm, 1 L2, 2 L1, 3 mean of |x| */
@PRELUDE@
/* What each element adds to s: its square (NORM 0, 1) or its absolute value (2, 3; the sign bit cleared). */
static inline float term(float v) { return NORM >= 2 ? __builtin_fabsf(v) : v * v; }
static inline vf vterm(vf v) { return NORM >= 2 ? (vf)((vi)v & 0x7fffffff) : v * v; }
/* Sums of terms: float vectors over sub-blocks of SB elements (RB rows when strided), folded into doubles. */
#define SB (STEP * 16)
#define RB 64

static float sum_of(const float* restrict x, int64_t lo, int64_t hi)
{
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = vsplat(0.0f);
    int64_t j = lo;
    for (; j + STEP <= hi; j += STEP)
        for (int u = 0; u < UNROLL; ++u) {
            acc[u] += vterm(vload(x + j + u * VW));
        }
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    float s = hsum(acc[0]);
    for (; j < hi; ++j) s += term(x[j]);
    return s;
}

/* y = x * factor(s): 1 / the divisor torch's reference computes, from s rounded to fp32 first (a mean after the
   division), as torch's fp32 sum and mean are. */
static inline float inv_norm(double s, int64_t n, float eps)
{
#if NORM == 0
    return 1.0f / __builtin_sqrtf((float)(s / (double)n) + eps);
#elif NORM == 1
    return 1.0f / __builtin_sqrtf((float)s);
#elif NORM == 2
    return 1.0f / (float)s;
#else
    return 1.0f / (float)(s / (double)n);
#endif
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

/* Columns c0..c0+w of slice o: sums of terms down the normalised dim (rows read as contiguous runs of w
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
                vstore(acc + k, vload(acc + k) + vterm(vload(xr + k)));
            }
            for (; k < w; ++k) acc[k] += term(xr[k]);
        }
        for (int64_t k = 0; k < w; ++k) total[k] += (double)acc[k];
    }
    for (int64_t k = 0; k < w; ++k) inv[k] = inv_norm(total[k], red, eps);
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
            for (int64_t b = 0; b < red; b += SB) s += (double)sum_of(xr, b, min64(b + SB, red));
            scale_row(xr, w, y + o * red, red, inv_norm(s, red, eps));
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
""")

RMS_CPU_PY = r'''"""Builtin candidate `rmsnorm_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

@FORMULA@@TIMES_WEIGHT@, on float32 CPU tensors.
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
    _, weight, times = weight_parts(params)
    c_src = fill(
        RMS_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        UNROLL=params["unroll"],
        PARALLEL=c_bool(params["threads"] == "all"),
        CB=params["cols_block"],
        NORM=norm_code(params),
        PRELUDE=C_PRELUDE,
    )
    return fill(
        RMS_CPU_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        FORMULA=formula(params),
        TIMES_WEIGHT=times,
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"], ("functools",)),
        BINDING=binding_block("rmsnorm_cpu", {"rmsnorm": ("ppiiiif", "")}, params["binding"]),
        MODULE=rms_module(params),
        WEIGHT=weight,
    )
