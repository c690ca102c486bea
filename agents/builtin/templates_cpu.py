"""What the CPU kernel templates share: C compiled by the system compiler at import, called through ctypes
(or a tiny CPython extension) on tensor pointers, and a C prelude of vector helpers and a vectorisable exp.

The templates (``templates_softmax_cpu``, ``templates_layernorm_cpu``, ``templates_matmul_cpu``, and the
reduction, RMSNorm and elementwise ones) each render a complete candidate file like
``problems/candidates/*_cpu.py``. Its C source is a plain raw string whose ``#ifndef`` defaults hold the
chosen parameters, so the file is readable on its own and the kernel compiled is exactly the one described.
The C uses GCC/Clang vector extensions (``VW`` floats per vector: 8 = AVX2, 16 = AVX-512; the compiler
splits wider vectors on narrower machines, so a candidate is correct everywhere) and OpenMP for threads.
Flags add ``-fno-trapping-math`` (lets the compiler if-convert the clamps in ``exp``) and
``-ffp-contract=fast`` (FMAs); the code does not rely on IEEE corner cases, so it stays accurate under
``-ffast-math`` as well.
"""

from __future__ import annotations

from agents.builtin._text import fill

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

__all__ = ["C_FLAGS", "C_PRELUDE", "binding_block", "imports_block", "pyext_source"]
