"""Fused pointwise kernels on the CPU (C through gcc): ``elementwise_cpu`` and ``epilogue_cpu``.

OpenMP over contiguous ranges and a ``#pragma omp simd`` loop that GCC vectorises. Broadcast operands are
handled per *segment* (a run over which each one is either a constant or a contiguous slice), so the inner
loop has no integer division.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.pointwise import band
from agents.builtin.templates_cpu import binding_block
from agents.builtin.templates_elementwise_expression import Expression
from agents.builtin.templates_elementwise_math import COMMON, CPU_MATH
from agents.builtin.templates_elementwise_python import (
    CONSTANTS_PY,
    DOC_PY,
    MODEL_PY,
    Params,
    candidate_fields,
    prepare,
)

CPU_C = c_params(r"""
/* Fused pointwise chain: y[i] = ew_apply(full operands at i, broadcast operands at (i / inner) % size).
@SUMMARY_C@ */
#param PARALLEL      /* OpenMP over contiguous ranges (single-threaded below PAR_MIN elements) */
#param CHUNK         /* elements per OpenMP task; 0: one contiguous range per thread */
#param INPLACE        /* y is the first full operand's buffer (the heavy op's result) */
#define PAR_MIN 32768
#if INPLACE
#define ALIAS                /* read and written through two pointers: no restrict on either */
#else
#define ALIAS restrict
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=@VWBITS@")  /* @VW@ floats per vector */
#endif
@MATH@
@COMMON@
@APPLY@
/* One range [lo, hi), cut into segments over which every broadcast operand is a constant (runs of `inner`
   equal elements) or a contiguous slice (along the last dim): the inner loop has no division and vectorises. */
static void ew_range(@PARAMS_C@, float* ALIAS y, int64_t lo, int64_t hi)
{
    int64_t i = lo;
    while (i < hi) {
        int64_t end = hi;
@SEGMENT@
#pragma omp simd
        for (int64_t k = i; k < end; ++k)
            y[k] = ew_apply(@CALL@);
        i = end;
    }
}

void ew_run(@PARAMS_C@, float* ALIAS y, int64_t n)
{
#if PARALLEL
#if CHUNK > 0
    const int64_t tasks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t c = 0; c < tasks; ++c)
        ew_range(@ARGS@, y, c * CHUNK, c * CHUNK + CHUNK < n ? c * CHUNK + CHUNK : n);
#else
#pragma omp parallel if (n >= PAR_MIN)
    {
#ifdef _OPENMP
        const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
#else
        const int64_t t = 0, threads = 1;
#endif
        /* ranges start on 64-element (256-byte) boundaries: no cache line is written by two threads */
        const int64_t lo = t == 0 ? 0 : (n * t / threads) & ~(int64_t)63;
        const int64_t hi = t == threads - 1 ? n : (n * (t + 1) / threads) & ~(int64_t)63;
        ew_range(@ARGS@, y, lo, hi);
    }
#endif
#else
    ew_range(@ARGS@, y, 0, n);
#endif
}
""")

CPU_PY = (
    DOC_PY
    + r'''
@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_run = _bind().ew_run
'''
    + CONSTANTS_PY
    + MODEL_PY
)


def _cpu_c(spec: dict[str, Any], params: Params, summary: str, inplace: bool) -> str:
    e = Expression(spec)
    apply = e.function()
    nf, nb = len(e.full), len(e.bands)
    params_c = ", ".join(
        [f"const float* {'ALIAS' if k == 0 else 'restrict'} f{k}" for k in range(nf)]
        + [f"const float* restrict b{k}, int64_t inner{k}, int64_t size{k}" for k in range(nb)]
    )
    segment, call_bands = [], []
    for k, j in enumerate(e.bands):
        size, inner = band(e.leaves[j]["shape"], spec["out_shape"])
        if inner == 1 and size > 1:  # along the last dim: a contiguous slice until it wraps
            segment += [
                f"        const int64_t o{k} = i % size{k};  /* operand {k}: a slice along the last dim */",
                f"        if (i + (size{k} - o{k}) < end) end = i + (size{k} - o{k});",
                f"        const float* restrict p{k} = b{k} + o{k};",
            ]
            call_bands.append(f"p{k}[k - i]")
        else:  # constant over runs of `inner` elements
            segment += [
                f"        const float c{k} = b{k}[(i / inner{k}) % size{k}];  /* operand {k}: constant per run */",
                f"        if (size{k} > 1 && (i / inner{k} + 1) * inner{k} < end) end = (i / inner{k} + 1) * inner{k};",
            ]
            call_bands.append(f"c{k}")
    args = ", ".join([f"f{k}" for k in range(nf)] + [f"b{k}, inner{k}, size{k}" for k in range(nb)])
    return fill(
        CPU_C,
        SUMMARY_C=wrap(summary, "   "),
        PARALLEL=c_bool(params["parallel"]),
        CHUNK=params["chunk"],
        INPLACE=c_bool(inplace),
        VW=params["vec"],
        VWBITS=32 * params["vec"],
        MATH=CPU_MATH,
        COMMON=COMMON,
        APPLY=apply,
        PARAMS_C=params_c,
        SEGMENT="\n".join(segment) if segment else "        /* no broadcast operand: one segment */",
        CALL=", ".join([f"f{k}[k]" for k in range(nf)] + call_bands),
        ARGS=args,
    )


def render_cpu(params: Params, summary: str, template: str, epilogue: bool) -> str:
    spec, inplace, fw = prepare(params, template, epilogue, "cpu")
    lines, full_ptrs, band_args = fw.lines(params, epilogue)
    lines.insert(0, "# Kept lean on purpose: each torch or extension call costs microseconds when the caches are cold.")
    lines.append(f"_run({', '.join([*full_ptrs, *band_args, 'out.data_ptr()', 'n'])})")
    lines.append("return out")
    e = fw.expr
    signature = "p" * len(e.full) + "pii" * len(e.bands) + "pi"
    return fill(
        CPU_PY,
        IMPORTS=_cpu_imports(params["binding"], epilogue),
        C_SRC=_cpu_c(spec, params, summary, inplace),
        BINDING=binding_block(template, {"ew_run": (signature, "")}, params["binding"]),
        **candidate_fields(params, summary, template, epilogue, fw, lines),
    )


def _cpu_imports(binding: str, epilogue: bool) -> str:
    stdlib = {"ctypes", "math"} | ({"importlib.util", "os", "sysconfig"} if binding == "cext" else set())
    names = "build_c, load_c" if binding == "cext" else "load_c"
    lines = [f"import {m}" for m in sorted(stdlib)]
    lines += ["", "import torch", "import torch.nn as nn"]
    if epilogue:
        lines.append("import torch.nn.functional as F")
    lines += ["", f"from tools.compile import {names}", ""]
    return "\n".join(lines)


def render_elementwise_cpu(params: Params, summary: str) -> str:
    return render_cpu(params, summary, "elementwise_cpu", epilogue=False)


def render_epilogue_cpu(params: Params, summary: str) -> str:
    return render_cpu(params, summary, "epilogue_cpu", epilogue=True)
