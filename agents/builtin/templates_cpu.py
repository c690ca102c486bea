"""CPU kernel templates: C compiled by the system compiler at import, called through ctypes on tensor pointers.

Every template renders a complete candidate file like ``problems/candidates/*_cpu.py``. Its C source is a
plain raw string whose ``#ifndef`` defaults hold the chosen parameters, so the file is readable on its own
and the kernel compiled is exactly the one described. The C uses GCC/Clang vector extensions (``VW``
floats per vector: 8 = AVX2, 16 = AVX-512; the compiler splits wider vectors on narrower machines, so a
candidate is correct everywhere) and OpenMP for threads. Flags add ``-fno-trapping-math`` (lets the
compiler if-convert the clamps in ``exp``) and ``-ffp-contract=fast`` (FMAs); the code does not rely on
IEEE corner cases, so it stays accurate under ``-ffast-math`` as well.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import LAYERNORM_MODULE, c_bool, c_params, fill, params_text, transposed, wrap

C_FLAGS = '("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast", "-fopenmp")'

# How a candidate reaches its C functions. "ctypes" is the portable path. "cext" wraps them in a tiny
# CPython extension (METH_FASTCALL) built from the same source: a call costs ~1.3 µs instead of ~8 µs when
# the caches are cold (measured after a 64 MiB flush, as the harness times), which matters for kernels of
# tens of microseconds. It falls back to ctypes when Python's headers are missing.
_ARG_C = {
    "p": ("void*", "PyLong_AsVoidPtr({})"),
    "i": ("int64_t", "PyLong_AsLongLong({})"),
    "n": ("int", "(int)PyLong_AsLong({})"),
    "f": ("float", "(float)PyFloat_AsDouble({})"),
}
_RET_C = {"": None, "i": "PyLong_FromLongLong", "n": "PyLong_FromLong"}

BIND_CTYPES_PY = r'''

def _bind():
    """Load the kernels through ctypes; argument and result types from SIGNATURES."""
    lib = load_c(C_SRC, name="@NAME@", flags=C_FLAGS)
    types = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "n": ctypes.c_int, "f": ctypes.c_float, "": None}
    for name, (args, ret) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = [types[c] for c in args]
        fn.restype = types[ret]
    return lib
'''

BIND_CEXT_PY = r'''

def _bind():
    """Load the kernels as a small CPython extension (cheaper calls than ctypes); ctypes without Python.h."""
    include = sysconfig.get_paths()["include"]
    if os.path.exists(os.path.join(include, "Python.h")):
        report = build_c(C_SRC + PYEXT_SRC, name="@NAME@_ext", flags=(*C_FLAGS, "-I" + include))
        if report.ok:
            spec = importlib.util.spec_from_file_location("kforge_@NAME@", report.artifact)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    lib = load_c(C_SRC, name="@NAME@", flags=C_FLAGS)
    types = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "n": ctypes.c_int, "f": ctypes.c_float, "": None}
    for name, (args, ret) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = [types[c] for c in args]
        fn.restype = types[ret]
    return lib
'''


def pyext_source(module: str, signatures: dict[str, tuple[str, str]]) -> str:
    """C source of a CPython extension ``module`` wrapping the C functions of ``signatures``."""
    out = [
        "",
        "/* CPython bindings (METH_FASTCALL) for the functions above. */",
        "#define PY_SSIZE_T_CLEAN",
        "#include <Python.h>",
        "",
    ]
    for name, (args, ret) in signatures.items():
        out.append(f"static PyObject* py_{name}(PyObject* self, PyObject* const* args, Py_ssize_t nargs)")
        out.append("{")
        out.append(f"    if (nargs != {len(args)}) {{")
        out.append(f'        PyErr_SetString(PyExc_TypeError, "{name}() takes {len(args)} arguments");')
        out.append("        return NULL;")
        out.append("    }")
        for i, code in enumerate(args):
            ctype, conv = _ARG_C[code]
            out.append(f"    {ctype} const a{i} = {conv.format(f'args[{i}]')};")
        out.append("    if (PyErr_Occurred()) return NULL;")
        call = f"{name}({', '.join(f'a{i}' for i in range(len(args)))})"
        if _RET_C[ret] is None:
            out += ["    Py_BEGIN_ALLOW_THREADS", f"    {call};", "    Py_END_ALLOW_THREADS", "    Py_RETURN_NONE;"]
        else:
            out.append(f"    return {_RET_C[ret]}({call});")
        out += ["}", ""]
    out.append("static PyMethodDef methods[] = {")
    for name in signatures:
        out.append(f'    {{"{name}", (PyCFunction)(void (*)(void))py_{name}, METH_FASTCALL, NULL}},')
    out += ["    {NULL, NULL, 0, NULL},", "};", ""]
    out.append(f'static struct PyModuleDef module_def = {{PyModuleDef_HEAD_INIT, "{module}", NULL, -1, methods}};')
    out.append(f"PyMODINIT_FUNC PyInit_{module}(void) {{ return PyModule_Create(&module_def); }}")
    return "\n".join(out) + "\n"


def binding_block(name: str, signatures: dict[str, tuple[str, str]], binding: str) -> str:
    """The candidate's module-level code between its C source and its model: flags, signatures, ``_bind``."""
    sig = "{" + ", ".join(f"{k!r}: ({a!r}, {r!r})" for k, (a, r) in signatures.items()) + "}"
    head = f"C_FLAGS = {C_FLAGS}\nSIGNATURES = {sig}  # p: pointer, i: int64, n: int, f: float; '': void\n"
    if binding == "cext":
        ext = pyext_source(f"kforge_{name}", signatures)
        return 'PYEXT_SRC = r"""' + ext + '"""\n\n\n' + head + fill(BIND_CEXT_PY, NAME=name)
    return head + fill(BIND_CTYPES_PY, NAME=name)


def imports_block(binding: str, extra: tuple[str, ...] = ()) -> str:
    """The candidate's imports, sorted as ruff/isort would."""
    stdlib = {"ctypes", *extra} | ({"importlib.util", "os", "sysconfig"} if binding == "cext" else set())
    compile_names = "build_c, load_c" if binding == "cext" else "load_c"
    lines = [f"import {m}" for m in sorted(stdlib)]
    lines += ["", "import torch", "import torch.nn as nn", "", f"from tools.compile import {compile_names}", ""]
    return "\n".join(lines)


# Vector helpers and a vectorisable exp (Cephes expf: Cody-Waite range reduction, degree-6 polynomial,
# ~2 ulp on the clamped range; below -87 it returns ~1.6e-38 instead of a denormal or 0).
C_PRELUDE = r"""
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
#define STEP (VW * UNROLL)

static inline vf vload(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float* p, vf v) { memcpy(p, &v, sizeof v); }
#if VW == 16
#define VSPLAT(a) ((vf){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a})
#elif VW == 8
#define VSPLAT(a) ((vf){a, a, a, a, a, a, a, a})
#else
#define VSPLAT(a) ((vf){a, a, a, a})
#endif
static inline vf vsplat(float a) { return VSPLAT(a); }  /* a lane loop here would not become a broadcast */
static inline vf vmax(vf a, vf b) { const vi m = a > b; return (vf)(((vi)a & m) | ((vi)b & ~m)); }
static inline float hmax(vf v) { float m = v[0]; for (int i = 1; i < VW; ++i) m = v[i] > m ? v[i] : m; return m; }
static inline float hsum(vf v) { float s = 0.0f; for (int i = 0; i < VW; ++i) s += v[i]; return s; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static inline vf vexp(vf x)
{
    const vi lo = x < -87.0f, hi = x > 88.0f;
    x = (vf)(((vi)x & ~lo) | ((vi)vsplat(-87.0f) & lo));
    x = (vf)(((vi)x & ~hi) | ((vi)vsplat(88.0f) & hi));
    const vi n = __builtin_convertvector(x * 1.44269504088896341f + 128.5f, vi) - 128;  /* round(x / ln 2) */
    const vf fn = __builtin_convertvector(n, vf);
    const vf r = (x - fn * 0.693359375f) - fn * -2.12194440e-4f;
    vf p = vsplat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    return p * (vf)((n + 127) << 23);
}

static inline float sexp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const int32_t n = (int32_t)(x * 1.44269504088896341f + 128.5f) - 128;
    const float fn = (float)n;
    const float r = (x - fn * 0.693359375f) - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union { int32_t i; float f; } u;
    u.i = (n + 127) << 23;
    return p * u.f;
}
"""

# ----------------------------------------------------------------------------------------- softmax

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


def _prelude() -> str:
    return C_PRELUDE


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
        PRELUDE=_prelude(),
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


# --------------------------------------------------------------------------------------- layernorm

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
        PRELUDE=_prelude(),
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


# ------------------------------------------------------------------------------------------ matmul

MATMUL_C = c_params(r"""
/* C = A @ B (fp32, fp32 accumulation), batched over a leading dim.
@SUMMARY_C@
   BLIS-style: B packed in KC x NC blocks of NR-wide column panels (shared by the threads), A packed
   per thread in MR-row panels, an MR x NR register micro-kernel; partial tiles are zero-padded. */
#param VW            /* floats per vector */
#param MR            /* rows of the micro-tile */
#param NV            /* vectors per row of the micro-tile: NR = NV * VW columns */
#param KC           /* depth of a packed block */
#param MC           /* rows of A per thread task (at most) */
#param NC          /* columns of a packed B block */
#param THREADED      /* use every OpenMP thread (0: one thread) */
#define UNROLL 1
@PRELUDE@
#define NR (NV * VW)

int max_threads(void)
{
#if THREADED && defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

int64_t workspace_floats(int64_t M, int64_t K, int64_t N, int nthreads)
{
    const int64_t kc = min64(KC, K), nc = min64(NC, N), mc = min64(MC, round_up(M, MR));
    return kc * round_up(nc, NR) + (int64_t)nthreads * kc * round_up(mc, MR) + 16;
}

static inline void micro(const float* restrict ap, const float* restrict bp, int64_t kc, float* restrict c,
                         int64_t ldc, int64_t mr, int64_t nr, int accumulate)
{
    vf acc[MR][NV];
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = vsplat(0.0f);
    for (int64_t k = 0; k < kc; ++k) {
        vf b[NV];
        for (int v = 0; v < NV; ++v) b[v] = vload(bp + k * NR + v * VW);
        for (int i = 0; i < MR; ++i) {
            const vf a = vsplat(ap[k * MR + i]);
            for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
        }
    }
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; ++i)
            for (int v = 0; v < NV; ++v) {
                float* p = c + i * ldc + v * VW;
                vstore(p, accumulate ? vload(p) + acc[i][v] : acc[i][v]);
            }
    } else {
        float tile[MR][NR];
        for (int i = 0; i < MR; ++i)
            for (int v = 0; v < NV; ++v) vstore(&tile[i][v * VW], acc[i][v]);
        for (int64_t i = 0; i < mr; ++i)
            for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i][j] : tile[i][j];
    }
}

void matmul(const float* restrict A, const float* restrict B, float* restrict C, int64_t batch, int64_t M,
            int64_t K, int64_t N, float* restrict ws, int nthreads)
{
    if (K == 0) {
        memset(C, 0, sizeof(float) * (size_t)(batch * M * N));
        return;
    }
    const int64_t kcmax = min64(KC, K), ncmax = min64(NC, N), mcmax = min64(MC, round_up(M, MR));
    float* bpack = ws;
    float* apacks = ws + kcmax * round_up(ncmax, NR);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
#ifdef _OPENMP
        const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
#else
        const int nt = 1, tid = 0;
#endif
        float* apack = apacks + (int64_t)tid * kcmax * round_up(mcmax, MR);
        /* Row blocks of at most MC rows, as many per thread for every thread (balanced). */
        int64_t nblk = (M + mcmax - 1) / mcmax;
        nblk = (nblk + nt - 1) / nt * nt;
        int64_t mcb = round_up((M + nblk - 1) / nblk, MR);
        if (mcb > round_up(mcmax, MR)) mcb = round_up(mcmax, MR);
        for (int64_t g = 0; g < batch; ++g) {
            const float* a = A + g * M * K;
            const float* b = B + g * K * N;
            float* c = C + g * M * N;
            for (int64_t jc = 0; jc < N; jc += NC) {
                const int64_t nc = min64(NC, N - jc);
                for (int64_t pc = 0; pc < K; pc += KC) {
                    const int64_t kc = min64(KC, K - pc);
                    #pragma omp for schedule(static)
                    for (int64_t jr = 0; jr < nc; jr += NR) {
                        const int64_t nr = min64(NR, nc - jr);
                        float* dst = bpack + jr * kc;
                        for (int64_t k = 0; k < kc; ++k) {
                            const float* src = b + (pc + k) * N + jc + jr;
                            int64_t j = 0;
                            for (; j < nr; ++j) dst[k * NR + j] = src[j];
                            for (; j < NR; ++j) dst[k * NR + j] = 0.0f;
                        }
                    }
                    #pragma omp for schedule(static)
                    for (int64_t ic = 0; ic < M; ic += mcb) {
                        const int64_t mc = min64(mcb, M - ic);
                        for (int64_t ir = 0; ir < mc; ir += MR) {
                            const int64_t mr = min64(MR, mc - ir);
                            float* dst = apack + ir * kc;
                            for (int64_t k = 0; k < kc; ++k) {
                                int64_t i = 0;
                                for (; i < mr; ++i) dst[k * MR + i] = a[(ic + ir + i) * K + pc + k];
                                for (; i < MR; ++i) dst[k * MR + i] = 0.0f;
                            }
                        }
                        for (int64_t jr = 0; jr < nc; jr += NR)
                            for (int64_t ir = 0; ir < mc; ir += MR)
                                micro(apack + ir * kc, bpack + jr * kc, kc, c + (ic + ir) * N + jc + jr, N,
                                      min64(MR, mc - ir), min64(NR, nc - jr), pc > 0);
                    }
                }
            }
        }
    }
}
""")

MATMUL_PY = r'''"""Builtin candidate `matmul_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul),
fp32 accumulation, any sizes.
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_lib = _bind()
_matmul, _workspace_floats = _lib.matmul, _lib.workspace_floats
_THREADS = _lib.max_threads()
_F32 = torch.float32
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T


class ModelNew(nn.Module):
    """C = A @ B (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()
        self._workspace = torch.empty(0, dtype=_F32)  # packing scratch (not results), grown on demand

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if A.dtype != _F32 or B.dtype != _F32 or not (A.is_cpu and B.is_cpu):
            raise TypeError("A and B must be float32 CPU tensors")
        if _TRANSPOSED[0]:
            A = A.t()  # the problem multiplies A.T (made contiguous below: one copy, then the same kernel)
        if _TRANSPOSED[1]:
            B = B.t()
        sa, sb = A.shape, B.shape
        if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:
            batch, M, K, N = 1, sa[0], sa[1], sb[1]
            out_shape = (M, N)
        elif len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and sa[2] == sb[1]:
            batch, M, K, N = sa[0], sa[1], sa[2], sb[2]
            out_shape = (batch, M, N)
        elif len(sa) > 2 and len(sb) == 2 and sa[-1] == sb[0]:  # (..., K) @ (K, N), as torch.matmul
            batch, M, K, N = 1, sa[:-1].numel(), sa[-1], sb[1]
            out_shape = (*sa[:-1], N)
        else:
            raise ValueError(f"cannot multiply {tuple(sa)} by {tuple(sb)}")
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty(out_shape, dtype=_F32)
        if batch * M * N == 0:
            return C
        need = _workspace_floats(M, K, N, _THREADS)
        if self._workspace.numel() < need:
            self._workspace = torch.empty(need, dtype=_F32)
        _matmul(A.data_ptr(), B.data_ptr(), C.data_ptr(), batch, M, K, N, self._workspace.data_ptr(), _THREADS)
        return C
'''


def render_matmul(params: dict[str, Any], summary: str) -> str:
    c_src = fill(
        MATMUL_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        MR=params["mr"],
        NV=params["nv"],
        KC=params["kc"],
        MC=params["mc"],
        NC=params["nc"],
        THREADED=c_bool(params["threads"] == "all"),
        PRELUDE=_prelude(),
    )
    signatures = {"matmul": ("pppiiiipn", ""), "workspace_floats": ("iiin", "i"), "max_threads": ("", "n")}
    return fill(
        MATMUL_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"]),
        BINDING=binding_block("matmul_cpu", signatures, params["binding"]),
        TRANSPOSED=transposed(params),
    )


RENDERERS = {
    "softmax_cpu": render_softmax,
    "layernorm_cpu": render_layernorm,
    "matmul_cpu": render_matmul,
}

__all__ = ["RENDERERS", "pyext_source"]
