"""Fused pointwise kernels: the ``elementwise`` and ``epilogue`` families, CUDA and CPU.

The expression comes from the problem (``agents.builtin.pointwise`` turns the reference's op trace into a
JSON spec, carried in the params as ``spec``); this module compiles it to one C function ``ew_apply`` of the
operands' values at one output element, and wraps that in

- CUDA: a grid-stride kernel, float4 loads and stores when every full operand and the output are 16-byte
  aligned (a scalar kernel otherwise), ITEMS vectors per thread in flight, 32-bit index math whenever the
  tensor allows (64-bit otherwise), broadcast operands read at ``(i / inner) % size``;
- CPU: C with OpenMP over contiguous ranges and a ``#pragma omp simd`` loop that GCC vectorises. Broadcast
  operands are handled per *segment* (a run over which each one is either a constant or a contiguous slice),
  so the inner loop has no integer division. The transcendental functions are branch-free polynomials
  written to vectorise (libm's are scalar calls): ``exp`` is Cephes' (~2 ulp), ``log`` Cephes' logf (~1 ulp),
  ``tanh`` Cephes' odd polynomial below 0.625 and ``1 - 2 / (exp(2|x|) + 1)`` above, ``erf`` a Taylor series
  below 0.5 and Abramowitz-Stegun 7.1.26 above (absolute error < 1.5e-7), ``expm1``/``log1p`` with small-|x|
  forms: all far inside both tolerance policies (strict: 1e-4).

An epilogue candidate runs the heavy op through torch (cuBLAS / cuDNN on the GPU, the CPU BLAS / oneDNN on
the CPU) and the whole pointwise tail as one kernel, in place on the heavy op's output or into a new buffer;
the reference's bias can stay in the library call or move into the tail. The harness allows that library
call only for such problems and only when the candidate runs no pointwise op in torch
(``tools.cheat_tricks.library_family``), and says so in the result.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agents.builtin._text import c_bool, c_float, fill, wrap
from agents.builtin.pointwise import BOOL_OPS, TRANSCENDENTAL, band, load
from agents.builtin.templates_cpu import binding_block

Params = dict[str, Any]

# ------------------------------------------------------------------------------------------ math

CUDA_MATH = r"""
#define EW_FN __device__ __forceinline__
#define EW_INF __int_as_float(0x7f800000)
#if FAST_MATH
// __expf / __logf (ex2.approx / lg2.approx: ~2 ulp, plus ~1e-7 absolute near exp's underflow and log(1)),
// __fdividef (0 when the divisor exceeds 2^126, which no finite fp32 operand of these chains reaches here).
#define EW_EXP(x) __expf(x)
#define EW_LOG(x) __logf(x)
#define EW_DIV(a, b) __fdividef((a), (b))
EW_FN float EW_TANH(float x)
{
    const float e = __expf(-2.0f * fabsf(x));  // in (0, 1]: no overflow; absolute error ~1e-7 near 0
    return copysignf(__fdividef(1.0f - e, 1.0f + e), x);
}
#else
#define EW_EXP(x) expf(x)
#define EW_LOG(x) logf(x)
#define EW_DIV(a, b) ((a) / (b))
#define EW_TANH(x) tanhf(x)
#endif
#define EW_EXP2(x) exp2f(x)
#define EW_EXPM1(x) expm1f(x)
#define EW_LOG2(x) log2f(x)
#define EW_LOG10(x) log10f(x)
#define EW_LOG1P(x) log1pf(x)
#define EW_SQRT(x) sqrtf(x)
#define EW_RSQRT(x) rsqrtf(x)
#define EW_ERF(x) erff(x)
#define EW_SIN(x) sinf(x)
#define EW_COS(x) cosf(x)
#define EW_POW(a, b) powf((a), (b))
#define EW_FLOOR(x) floorf(x)
#define EW_CEIL(x) ceilf(x)
#define EW_TRUNC(x) truncf(x)
#define EW_RINT(x) rintf(x)
#define EW_FABS(x) fabsf(x)
"""

CPU_MATH = r"""
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define EW_FN static inline
#define EW_INF INFINITY

static inline float ew_from_bits(int32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }
static inline int32_t ew_to_bits(float f) { int32_t b; memcpy(&b, &f, sizeof b); return b; }

/* Cephes expf: x = n ln2 + r (Cody-Waite), degree-6 polynomial in r (~2 ulp). 2^n is applied as two halves
   so that n = 128 (x up to 88.72) and results down to the denormals stay exact; inf above, 0 below. */
EW_FN float k_exp(float x)
{
    const float c = x < -103.9f ? -103.9f : (x > 88.7228f ? 88.7228f : x);
    const float fn = __builtin_floorf(c * 1.44269504088896341f + 0.5f);
    const float r = (c - fn * 0.693359375f) - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t n = (int32_t)fn, n1 = n >> 1, n2 = n - n1;
    const float e = p * ew_from_bits((n1 + 127) << 23) * ew_from_bits((n2 + 127) << 23);
    return x > 88.7228f ? EW_INF : (x < -103.9f ? 0.0f : e);
}

/* Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), a degree-8 polynomial in m - 1 (~1 ulp);
   denormals rescaled first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN. */
EW_FN float k_log(float x)
{
    const int tiny = x < 1.17549435e-38f;
    const float xs = tiny ? x * 8388608.0f : x;
    const int32_t bits = ew_to_bits(xs);
    int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = ew_from_bits((bits & 0x007fffff) | 0x3f000000);  /* in [0.5, 1) */
    const int lowm = m < 0.707106781186547524f;
    e = lowm ? e - 1 : e;
    m = lowm ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    const float fe = (float)e - (tiny ? 23.0f : 0.0f);
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    float r = m + y + 0.693359375f * fe;
    r = x == EW_INF ? EW_INF : r;
    r = x == 0.0f ? -EW_INF : r;
    return x < 0.0f ? NAN : (x != x ? x : r);
}

/* tanh: Cephes' odd polynomial below |x| = 0.625 (relative ~1e-7), 1 - 2 / (exp(2|x|) + 1) above. */
EW_FN float k_tanh(float x)
{
    const float ax = __builtin_fabsf(x), z = x * x;
    const float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                      1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    const float big = 1.0f - 2.0f / (k_exp(2.0f * ax) + 1.0f);
    return ax < 0.625f ? p : (x < 0.0f ? -big : big);
}

/* erf: Taylor series to x^11 below |x| = 0.5 (relative < 3e-8), Abramowitz-Stegun 7.1.26 above
   (absolute < 1.5e-7). */
EW_FN float k_erf(float x)
{
    const float ax = __builtin_fabsf(x), z = x * x;
    const float s = x * (1.1283791671f + z * (-0.3761263890f + z * (0.1128379167f + z * (-0.02686617064f +
                    z * (0.005223977625f + z * -0.0008548327023f)))));
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f +
                       t * 1.061405429f))));
    const float big = 1.0f - poly * k_exp(-z);
    return ax < 0.5f ? s : (x < 0.0f ? -big : big);
}

/* expm1: Taylor series to x^7 below |x| = 0.5 (relative < 2e-7), exp(x) - 1 above. */
EW_FN float k_expm1(float x)
{
    const float s = x * (1.0f + x * (0.5f + x * (1.6666667e-1f + x * (4.1666668e-2f + x * (8.3333333e-3f +
                    x * (1.3888889e-3f + x * 1.9841270e-4f))))));
    return __builtin_fabsf(x) < 0.5f ? s : k_exp(x) - 1.0f;
}

/* log1p: log(u) * x / (u - 1) with u = 1 + x corrects u's rounding (Goldberg); exact x where u rounds to 1. */
EW_FN float k_log1p(float x)
{
    const float u = 1.0f + x, d = u - 1.0f;
    const float r = d == 0.0f ? x : k_log(u) * (x / d);
    return x == EW_INF ? EW_INF : r;
}

#define EW_EXP(x) k_exp(x)
#define EW_LOG(x) k_log(x)
#define EW_DIV(a, b) ((a) / (b))
#define EW_TANH(x) k_tanh(x)
#define EW_EXP2(x) k_exp((x) * 0.693147180559945309f)
#define EW_EXPM1(x) k_expm1(x)
#define EW_LOG2(x) (k_log(x) * 1.44269504088896341f)
#define EW_LOG10(x) (k_log(x) * 0.434294481903251828f)
#define EW_LOG1P(x) k_log1p(x)
#define EW_SQRT(x) __builtin_sqrtf(x)
#define EW_RSQRT(x) (1.0f / __builtin_sqrtf(x))
#define EW_ERF(x) k_erf(x)
#define EW_SIN(x) sinf(x)  /* libm: a scalar call, the loop then runs unvectorised */
#define EW_COS(x) cosf(x)
#define EW_POW(a, b) powf((a), (b))
#define EW_FLOOR(x) __builtin_floorf(x)
#define EW_CEIL(x) __builtin_ceilf(x)
#define EW_TRUNC(x) __builtin_truncf(x)
#define EW_RINT(x) __builtin_rintf(x)
#define EW_FABS(x) __builtin_fabsf(x)
"""

# Composite activations, written once over the EW_ macros (selects, not fmaxf: NaN propagates like torch's).
COMMON = r"""
EW_FN float ew_sigmoid(float x) { return EW_DIV(1.0f, 1.0f + EW_EXP(-x)); }
EW_FN float ew_softplus(float x, float beta, float threshold)
{
    return x * beta > threshold ? x : EW_LOG1P(EW_EXP(x * beta)) / beta;
}
EW_FN float ew_gelu_erf(float x) { return 0.5f * x * (1.0f + EW_ERF(x * 0.707106781186547524f)); }
EW_FN float ew_gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + EW_TANH(0.797884560802865356f * (x + 0.044715f * x * x * x)));
}
EW_FN float ew_mish(float x) { return x * EW_TANH(ew_softplus(x, 1.0f, 20.0f)); }
EW_FN float ew_relu6_3(float x) { const float r = x + 3.0f; return r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r); }
EW_FN float ew_log_sigmoid(float x)
{
    return (x < 0.0f ? x : 0.0f) - EW_LOG1P(EW_EXP(-EW_FABS(x)));
}
EW_FN float ew_max(float a, float b) { return a != a ? a : (a > b ? a : b); }
EW_FN float ew_min(float a, float b) { return a != a ? a : (a < b ? a : b); }
EW_FN float ew_fmax(float a, float b) { return a != a ? b : (b != b ? a : (a > b ? a : b)); }
EW_FN float ew_fmin(float a, float b) { return a != a ? b : (b != b ? a : (a < b ? a : b)); }
EW_FN float ew_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
"""

# ------------------------------------------------------------------------------------ the expression


class Expression:
    """The spec's expression as C: ``ew_apply(a0.., w0..)`` over full operands a and broadcast operands w."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.leaves: list[dict[str, Any]] = spec["leaves"]
        self.full = [j for j, leaf in enumerate(self.leaves) if leaf["full"]]
        self.bands = [j for j, leaf in enumerate(self.leaves) if not leaf["full"]]
        self.lines: list[str] = []
        self.done: dict[int, tuple[str, bool]] = {}  # node -> (C name, is bool)

    def arg(self, j: int) -> str:
        return f"a{self.full.index(j)}" if j in self.full else f"w{self.bands.index(j)}"

    def signature(self) -> str:
        args = [f"float a{k}" for k in range(len(self.full))] + [f"float w{k}" for k in range(len(self.bands))]
        return ", ".join(args)

    def function(self, qualifier: str = "EW_FN") -> str:
        out, is_bool = self.emit(self.spec["out"])
        body = "\n".join(f"    {line}" for line in self.lines)
        result = f"({out} ? 1.0f : 0.0f)" if is_bool else out
        return f"{qualifier} float ew_apply({self.signature()})\n{{\n{body}\n    return {result};\n}}\n"

    def emit(self, i: int) -> tuple[str, bool]:
        """Post-order: each node once, as `const float tI = ...;` (iterative: chains can be long)."""
        stack = [(i, False)]
        while stack:
            node, expanded = stack.pop()
            if node in self.done:
                continue
            ins = self.spec["nodes"][node][1]
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(ins) if k not in self.done)
                continue
            self.done[node] = self.line(node)
        return self.done[i]

    def f(self, k: int) -> str:
        name, is_bool = self.done[k]
        return f"({name} ? 1.0f : 0.0f)" if is_bool else name

    def b(self, k: int) -> str:
        name, is_bool = self.done[k]
        return name if is_bool else f"({name} != 0.0f)"

    def const_of(self, k: int) -> float | None:
        op, _, attrs = self.spec["nodes"][k]
        return float(attrs[0]) if op == "const" else None

    def line(self, i: int) -> tuple[str, bool]:
        op, ins, attrs = self.spec["nodes"][i]
        if op == "leaf":
            return self.arg(attrs[0]), False
        if op == "const":
            return c_float(attrs[0]), False
        name = f"t{i}"
        is_bool = op in BOOL_OPS
        expr = self.c(op, ins, attrs)
        self.lines.append(f"const {'bool' if is_bool else 'float'} {name} = {expr};")
        return name, is_bool

    def c(self, op: str, ins: list[int], attrs: list[Any]) -> str:
        x = self.f(ins[0]) if ins else ""
        y = self.f(ins[1]) if len(ins) > 1 else ""
        a = [c_float(v) if isinstance(v, int | float) else v for v in attrs]
        simple = {
            "sigmoid": f"ew_sigmoid({x})",
            "tanh": f"EW_TANH({x})",
            "exp": f"EW_EXP({x})",
            "exp2": f"EW_EXP2({x})",
            "expm1": f"EW_EXPM1({x})",
            "log": f"EW_LOG({x})",
            "log2": f"EW_LOG2({x})",
            "log10": f"EW_LOG10({x})",
            "log1p": f"EW_LOG1P({x})",
            "sqrt": f"EW_SQRT({x})",
            "rsqrt": f"EW_RSQRT({x})",
            "abs": f"EW_FABS({x})",
            "neg": f"-({x})",
            "reciprocal": f"EW_DIV(1.0f, {x})",
            "sin": f"EW_SIN({x})",
            "cos": f"EW_COS({x})",
            "erf": f"EW_ERF({x})",
            "silu": f"{x} * ew_sigmoid({x})",
            "mish": f"ew_mish({x})",
            "hardswish": f"{x} * ew_relu6_3({x}) * (1.0f / 6.0f)",
            "hardsigmoid": f"ew_relu6_3({x}) * (1.0f / 6.0f)",
            "sign": f"ew_sign({x})",
            "floor": f"EW_FLOOR({x})",
            "ceil": f"EW_CEIL({x})",
            "trunc": f"EW_TRUNC({x})",
            "round": f"EW_RINT({x})",  # torch.round rounds half to even, as rint does
            "frac": f"{x} - EW_TRUNC({x})",
            "relu": f"{x} < 0.0f ? 0.0f : {x}",  # NaN stays NaN, like torch.relu
            "log_sigmoid": f"ew_log_sigmoid({x})",
            "add": f"{x} + {y}",
            "sub": f"{x} - {y}",
            "mul": f"{x} * {y}",
            "maximum": f"ew_max({x}, {y})",
            "minimum": f"ew_min({x}, {y})",
            "fmax": f"ew_fmax({x}, {y})",
            "fmin": f"ew_fmin({x}, {y})",
            "clamp_min": f"{x} < {y} ? {y} : {x}",
            "clamp_max": f"{x} > {y} ? {y} : {x}",
        }
        if op in simple:
            return simple[op]
        if op in ("gt", "ge", "lt", "le", "eq", "ne"):
            sym = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}[op]
            return f"{x} {sym} {y}"
        if op == "logical_not":
            return f"!{self.b(ins[0])}"
        if op in ("logical_and", "logical_or"):
            return f"{self.b(ins[0])} {'&&' if op == 'logical_and' else '||'} {self.b(ins[1])}"
        if op == "where":
            return f"{self.b(ins[0])} ? {self.f(ins[1])} : {self.f(ins[2])}"
        if op == "div":
            c = self.const_of(ins[1])
            if c is not None and c != 0.0 and math.frexp(abs(c))[0] == 0.5:  # a power of two: exact as a product
                return f"{x} * {c_float(1.0 / c)}"
            return f"EW_DIV({x}, {y})"
        if op == "pow":
            return self.power(ins, x, y)
        if op == "gelu":
            return f"ew_gelu_tanh({x})" if attrs[0] == "tanh" else f"ew_gelu_erf({x})"
        if op == "elu":  # torch: x > 0 ? scale * x : scale * alpha * (exp(x * input_scale) - 1)
            alpha, scale, in_scale = attrs
            return (
                f"{x} > 0.0f ? {c_float(scale)} * {x} : {c_float(scale * alpha)} * EW_EXPM1({x} * {c_float(in_scale)})"
            )
        if op == "celu":
            return f"{x} > 0.0f ? {x} : {a[0]} * EW_EXPM1({x} * {c_float(1.0 / attrs[0])})"
        if op == "leaky_relu":
            return f"{x} > 0.0f ? {x} : {x} * {a[0]}"
        if op == "softplus":
            return f"ew_softplus({x}, {a[0]}, {a[1]})"
        if op == "threshold":
            return f"{x} <= {a[0]} ? {a[1]} : {x}"
        if op == "hardshrink":
            return f"({x} >= {c_float(-attrs[0])} && {x} <= {a[0]}) ? 0.0f : {x}"
        if op == "softshrink":
            return f"{x} > {a[0]} ? {x} - {a[0]} : ({x} < {c_float(-attrs[0])} ? {x} + {a[0]} : 0.0f)"
        raise ValueError(f"no C form for {op}")

    def power(self, ins: list[int], x: str, y: str) -> str:
        e = self.const_of(ins[1])
        base = self.const_of(ins[0])
        if e is not None:
            products = {1.0: x, 2.0: f"{x} * {x}", 3.0: f"{x} * {x} * {x}", 4.0: f"({x} * {x}) * ({x} * {x})"}
            if e in products:
                return products[e]
            if e == 0.5:
                return f"EW_SQRT({x})"
            if e == -0.5:
                return f"EW_RSQRT({x})"
            if e == -1.0:
                return f"EW_DIV(1.0f, {x})"
            if e == -2.0:
                return f"EW_DIV(1.0f, {x} * {x})"
            if e == 0.0:
                return "1.0f"
        if base == 2.0:
            return f"EW_EXP2({y})"
        return f"EW_POW({x}, {y})"


LONG_CHAIN = 64  # computed nodes above which the CUDA kernels call ew_apply instead of inlining it


def _long(spec: dict[str, Any]) -> bool:
    return sum(n[0] not in ("leaf", "const") for n in spec["nodes"]) > LONG_CHAIN


def transcendental(spec: dict[str, Any]) -> bool:
    """Whether fast-math intrinsics could change anything (an exp, log, tanh or division in the chain)."""
    ops = {n[0] for n in spec["nodes"]}
    return bool(ops & TRANSCENDENTAL) or any(n[0] == "gelu" and n[2] == ["tanh"] for n in spec["nodes"])


# ------------------------------------------------------------------------------------- words


def _leaf_name(spec: dict[str, Any], leaf: dict[str, Any]) -> str:
    if leaf["kind"] == "input":
        return "x" if len(spec["inputs"]) == 1 else f"x{leaf['key']}"
    if leaf["kind"] == "param":
        return str(leaf["key"])
    h = spec["heavy"]
    if h["op"] == "linear":
        return "linear(x)"
    if h["op"] == "conv":
        return f"conv{'_transpose' if h['transposed'] else ''}{h['dims']}d(x)"
    return "matmul(a, b)"


def expression_text(spec: dict[str, Any], limit: int = 160) -> str:
    """The chain in words, e.g. ``clamp_max(clamp_min((gelu_tanh(x) * 2.0) - 0.5, -1.0), 1.0)``."""
    texts: dict[int, str] = {}
    for i, (op, ins, attrs) in enumerate(spec["nodes"]):
        args = [texts[k] for k in ins]
        if op == "leaf":
            texts[i] = _leaf_name(spec, spec["leaves"][attrs[0]])
        elif op == "const":
            texts[i] = f"{attrs[0]:g}"
        elif op == "clamp_max" and spec["nodes"][ins[0]][0] == "clamp_min":  # torch.clamp(x, lo, hi)
            inner = spec["nodes"][ins[0]][1]
            texts[i] = f"clamp({texts[inner[0]]}, {texts[inner[1]]}, {args[1]})"
        elif op in ("add", "sub", "mul", "div") and len(args) == 2:
            sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
            texts[i] = f"({args[0]} {sym} {args[1]})"
        else:
            extra = [a if isinstance(a, str) else f"{a:g}" for a in attrs]
            name = f"gelu_{attrs[0]}" if op == "gelu" else op
            texts[i] = f"{name}({', '.join(args + ([] if op == 'gelu' else extra))})"
        if len(texts[i]) > 4 * limit:
            texts[i] = texts[i][: 4 * limit]
    text = texts[spec["out"]]
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pointwise_ops(spec: dict[str, Any]) -> int:
    """About how many pointwise kernels eager torch runs for the chain (clamp's two bounds are one op)."""
    ops = [n[0] for n in spec["nodes"] if n[0] not in ("leaf", "const")]
    return max(1, len(ops) - min(ops.count("clamp_min"), ops.count("clamp_max")))


# ----------------------------------------------------------------------------------- shared Python

BAND_PY = r'''

def _band(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, int]:
    """(size, inner): `shape` broadcast to `out` holds, at flat index i, its element (i // inner) % size."""
    shape, out = tuple(shape), tuple(out)
    while len(shape) > len(out) and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > len(out):
        raise ValueError(f"{shape} does not broadcast to {out}")
    pad = (1,) * (len(out) - len(shape)) + shape
    dims = [d for d in range(len(out)) if pad[d] != 1]
    if not dims:
        return 1, 1
    lo, hi = dims[0], dims[-1] + 1
    if any(pad[d] != out[d] for d in range(lo, hi)):
        raise ValueError(f"{shape} is not one contiguous span of {out}")
    return math.prod(out[lo:hi]), math.prod(out[hi:])


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, list | tuple) else value


def _hold(module: nn.Module, name: str, shape: list[int]) -> None:
    """A parameter at the reference's state_dict name (the harness copies the reference's values in by name)."""
    *path, leaf = name.split(".")
    for part in path:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    module.register_parameter(leaf, nn.Parameter(torch.zeros(shape)))
'''

INIT_PY = r"""        super().__init__()
        if _lists(list(args)) != _INIT:
            raise ValueError(f"this candidate was generated for Model(*{_INIT!r}), not Model(*{list(args)!r})")
        for name, shape in _PARAMS.items():
            _hold(self, name, shape)"""


def _attr(name: str) -> str:
    """Python for a parameter of the model: `self.linear.weight`, or get_parameter for odd names."""
    if all(part.isidentifier() for part in name.split(".")):
        return f"self.{name}"
    return f"self.get_parameter({name!r})"


class _Forward:
    """The candidate's forward body (checks, operands, broadcast geometry), shared by CPU and CUDA."""

    def __init__(self, spec: dict[str, Any], device: str) -> None:
        self.spec, self.device = spec, device
        self.expr = Expression(spec)
        self.n_in = len(spec["inputs"])

    def operand(self, leaf: dict[str, Any]) -> str:
        if leaf["kind"] == "input":
            return f"x{leaf['key']}"
        if leaf["kind"] == "param":
            return _attr(leaf["key"])
        return "h"

    def lines(self, params: Params, epilogue: bool) -> tuple[list[str], list[str], list[str]]:
        """The lines up to the kernel call; the full operands' pointers; the broadcast ones' (ptr, inner, size)."""
        e = self.expr
        lines: list[str] = []
        for k in range(self.n_in):
            place = "not x{k}.is_cuda" if self.device == "cuda" else "not x{k}.is_cpu"
            what = f"x{k} must be a float32 {self.device.upper()} tensor, got {{x{k}.dtype}} on {{x{k}.device}}"
            lines += [f"if x{k}.dtype != _F32 or {place.format(k=k)}:", f'    raise TypeError(f"{what}")']
        if epilogue:
            call = _heavy_call(self.spec, params["bias"] == "library")
            lines += [f"h = {call}  # the heavy op stays in the library", "h = h.contiguous()"]
            lines.append("out = h" if params["inplace"] else "out = torch.empty_like(h)")
            first = "h"
        else:
            first = self.operand(e.leaves[e.full[0]])
            lines += [f"{first} = {first}.contiguous()", f"out = torch.empty_like({first})"]
        full_ptrs, band_args = [], []
        for j in e.full:
            name = self.operand(e.leaves[j])
            if name != first:
                lines.append(f"if {name}.shape != out.shape:")
                lines.append(f'    raise ValueError(f"operand {{tuple({name}.shape)}} is not the output\'s shape")')
                lines.append(f"{name} = {name}.contiguous()")
            full_ptrs.append(f"{name}.data_ptr()")
        for k, j in enumerate(e.bands):
            leaf = e.leaves[j]
            lines.append(f"w{k} = {self.operand(leaf)}.contiguous()")
            # A parameter's shape as the reference used it is fixed; a broadcast input's is what it is now.
            shape = f"tuple(w{k}.shape)" if leaf["kind"] == "input" else f"_BANDS[{k}]"
            lines.append(f"size{k}, inner{k} = _band({shape}, tuple(out.shape))")
            if self.device == "cpu" and self.lastdim(j):  # the C code reads it as a contiguous slice
                lines.append(f"if inner{k} != 1:")
                lines.append(f'    raise ValueError("operand {k} no longer runs along the last dim")')
            band_args += [f"w{k}.data_ptr()", f"inner{k}", f"size{k}"]
        lines += ["n = out.numel()", "if n == 0:", "    return out"]
        return lines, full_ptrs, band_args

    def lastdim(self, j: int) -> bool:
        size, inner = band(self.expr.leaves[j]["shape"], self.spec["out_shape"])
        return inner == 1 and size > 1

    def band_shapes(self) -> str:
        return repr(tuple(tuple(self.expr.leaves[j]["shape"]) for j in self.expr.bands))


def _heavy_call(spec: dict[str, Any], bias_in_library: bool) -> str:
    h = spec["heavy"]
    if h["op"] == "linear":
        bias = _attr(h["bias"]) if h["bias"] and bias_in_library else "None"
        return f"F.linear(x{h['x']}, {_attr(h['weight'])}, {bias})"
    if h["op"] == "matmul":
        a = f"x{h['a'][1]}"
        b = f"x{h['b'][1]}" if h["b"][0] == "input" else _attr(h["b"][1])
        return f"torch.matmul({a}, {b}{'.t()' if h['b_transposed'] else ''})"
    bias = _attr(h["bias"]) if h["bias"] and bias_in_library else "None"
    dims = h["dims"]
    if h["transposed"]:
        return (
            f"F.conv_transpose{dims}d(x{h['x']}, {_attr(h['weight'])}, {bias}, {h['stride']}, {h['padding']}, "
            f"{h['output_padding']}, {h['groups']}, {h['dilation']})"
        )
    return (
        f"F.conv{dims}d(x{h['x']}, {_attr(h['weight'])}, {bias}, {h['stride']}, {h['padding']}, "
        f"{h['dilation']}, {h['groups']})"
    )


def tail_bias(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the heavy op's bias moved into the tail: a broadcast operand added to the heavy output."""
    h = spec["heavy"]
    if not h or not h.get("bias"):
        return spec
    spec = json.loads(json.dumps(spec))
    n = spec["params"][h["bias"]][0]
    shape = [n] if h["op"] == "linear" else [n] + [1] * h["dims"]
    heavy_leaf = next(j for j, leaf in enumerate(spec["leaves"]) if leaf["kind"] == "heavy")
    heavy_node = next(i for i, node in enumerate(spec["nodes"]) if node[0] == "leaf" and node[2] == [heavy_leaf])
    spec["leaves"].append({"kind": "param", "key": h["bias"], "shape": shape, "full": False})
    nodes = spec["nodes"]
    bias_node, sum_node = len(nodes), len(nodes) + 1
    for node in nodes:
        node[1] = [sum_node if k == heavy_node else k for k in node[1]]
    nodes.append(["leaf", [], [len(spec["leaves"]) - 1]])
    nodes.append(["add", [heavy_node, bias_node], []])
    if spec["out"] == heavy_node:
        spec["out"] = sum_node
    return _topological(spec)


def _topological(spec: dict[str, Any]) -> dict[str, Any]:
    """Nodes renumbered so that every node comes after its inputs (the order the spec promises)."""
    order: list[int] = []
    seen: set[int] = set()
    stack = [(spec["out"], False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(spec["nodes"][node][1]) if k not in seen)
    index = {old: new for new, old in enumerate(order)}
    spec["nodes"] = [[op, [index[k] for k in ins], attrs] for op, ins, attrs in (spec["nodes"][i] for i in order)]
    spec["out"] = index[spec["out"]]
    return spec


def _doc_expr(spec: dict[str, Any], params: Params) -> str:
    text = expression_text(spec, limit=400)
    if spec["heavy"] and spec["heavy"].get("bias"):
        where = "in the library call" if params.get("bias", "library") == "library" else "added in the tail kernel"
        text += f"  (the heavy op's bias {spec['heavy']['bias']}: {where})"
    return wrap(text)


# ------------------------------------------------------------------------------------------- CUDA

CUDA_KERNEL = r"""
// Fused pointwise chain: out[i] = ew_apply(full operands at i, broadcast operands at (i / inner) % size).
@SUMMARY_C@
#ifndef BLOCK
#define BLOCK @BLOCK@        // threads per block
#endif
#ifndef ITEMS
#define ITEMS @ITEMS@          // vectors (float4, or floats in the scalar kernel) per thread in flight
#endif
#ifndef VEC
#define VEC @VEC@            // also build the float4 kernels (used when every full operand is 16-byte aligned)
#endif
#ifndef FAST_MATH
#define FAST_MATH @FAST@      // __expf / __logf / __fdividef instead of the full-precision functions
#endif
#ifndef INPLACE
#define INPLACE @INPLACE@        // the output is the first full operand's buffer (the heavy op's result)
#endif
#if INPLACE
#define ALIAS                // read and written through two pointers: no __restrict__ on either
#else
#define ALIAS __restrict__
#endif
@MATH@
@COMMON@
@APPLY@
template <typename I>
__device__ __forceinline__ I band_index(I i, I inner, I size)
{
    // inner and size are the same for the whole grid: these branches never diverge
    return size == 1 ? (I)0 : (inner == 1 ? i % size : (i / inner) % size);
}

template <typename I>
__device__ __forceinline__ void scalar_body(@PARAMS_T@, float* ALIAS y, I n)
{
    const I stride = (I)gridDim.x * (BLOCK * ITEMS);
    for (I base = (I)blockIdx.x * (BLOCK * ITEMS) + threadIdx.x; base < n; base += stride) {
@DECL_S@
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n) {
@LOAD_S@
            }
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n) y[i] = ew_apply(@CALL_S@);
        }
    }
}

#if VEC
template <typename I>
__device__ __forceinline__ void vec_body(@PARAMS_T@, float* ALIAS y, I n)
{
    const I n4 = n / 4;
    const I stride = (I)gridDim.x * (BLOCK * ITEMS);
    for (I base = (I)blockIdx.x * (BLOCK * ITEMS) + threadIdx.x; base < n4; base += stride) {
@DECL_V@
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n4) {
@LOAD_V@
            }
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n4) {
                const I e = 4 * i;
                float4 r;
                r.x = ew_apply(@CALL_X@);
                r.y = ew_apply(@CALL_Y@);
                r.z = ew_apply(@CALL_Z@);
                r.w = ew_apply(@CALL_W@);
                reinterpret_cast<float4*>(y)[i] = r;
            }
        }
    }
    // The last n % 4 elements, one thread each.
    if (blockIdx.x == 0 && (I)threadIdx.x < n - 4 * n4) {
        const I i = 4 * n4 + threadIdx.x;
        y[i] = ew_apply(@CALL_S_TAIL@);
    }
}
#endif

@ENTRIES@
"""

CUDA_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters (besides the problem's spec): @PARAMS@.

Computes:
@EXPR@
"""

@IMPORTS@

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
_BLOCK, _ITEMS, _WAVES, _VEC = @BLOCK@, @ITEMS@, @WAVES@, @VEC_PY@
_RESIDENT = max(1, 2048 // _BLOCK)  # blocks of _BLOCK threads one SM holds (2048 threads on H100/H200)
_F32 = torch.float32
_INIT = @INIT@  # the constructor arguments this candidate was generated for
_PARAMS = @PARAMS_SHAPES@  # the reference's parameters this candidate reads, by state_dict name
_BANDS = @BANDS@  # broadcast operands' shapes as the reference used them
@BAND_PY@

def _launch(n: int, full: tuple[int, ...], bands: tuple[int, ...], y: int, device: torch.device) -> None:
    aligned = _VEC and all(p % 16 == 0 for p in (*full, y))
    per_block = _BLOCK * _ITEMS * (4 if aligned else 1)
    blocks = -(-n // per_block)
    if _WAVES:  # a grid-stride loop over a fixed number of resident-block waves
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        blocks = min(blocks, _WAVES * sms * _RESIDENT)
    wide = n + 2 * blocks * per_block >= 2**31  # 32-bit index math whenever it cannot overflow
    index = cupy.int64 if wide else cupy.uint32
    name = ("ew_vec" if aligned else "ew_scalar") + ("_i64" if wide else "_i32")
    args = (*full, *(index(a) if k % 3 else a for k, a in enumerate(bands)), y, index(n))
    stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(device))
    with cupy.cuda.Device(device.index), stream:
        _MODULE.get_function(name)((blocks,), (_BLOCK,), args)


class ModelNew(nn.Module):
    """@CLASS_DOC@"""

    def __init__(self, *args):
@INIT_BODY@

    def forward(self, @ARGS@) -> torch.Tensor:
@FORWARD@
'''


def _cuda_kernel(spec: dict[str, Any], params: Params, summary: str, inplace: bool) -> str:
    e = Expression(spec)
    # A long chain is called, not inlined: inlined into the four lanes of four entry points it takes NVRTC
    # seconds (measured 4.8 s against 0.6 s for a 200-op chain), and a call costs little beside such a body.
    apply = e.function("__device__ __noinline__" if _long(spec) else "EW_FN")
    nf, nb = len(e.full), len(e.bands)
    params_t = ", ".join(
        [f"const float* {'ALIAS' if k == 0 else '__restrict__'} f{k}" for k in range(nf)]
        + [f"const float* __restrict__ b{k}, I inner{k}, I size{k}" for k in range(nb)]
    )

    def bands_at(index: str) -> list[str]:
        return [f"b{k}[band_index<I>({index}, inner{k}, size{k})]" for k in range(nb)]

    decl_s = "\n".join(f"        float v{k}[ITEMS];" for k in range(nf))
    load_s = "\n".join(f"                v{k}[k] = f{k}[i];" for k in range(nf))
    decl_v = "\n".join(f"        float4 v{k}[ITEMS];" for k in range(nf))
    load_v = "\n".join(f"                v{k}[k] = reinterpret_cast<const float4*>(f{k})[i];" for k in range(nf))

    def call(values: list[str], index: str) -> str:
        return ", ".join(values + bands_at(index))

    entries = []
    call_args = ", ".join([f"f{k}" for k in range(nf)] + [f"b{k}, inner{k}, size{k}" for k in range(nb)] + ["y", "n"])
    for kind in ("scalar", "vec"):
        for suffix, ctype in (("i32", "unsigned int"), ("i64", "long long")):
            sig = params_t.replace("I inner", f"{ctype} inner").replace("I size", f"{ctype} size")
            entry = (
                f'extern "C" __global__ void __launch_bounds__(BLOCK)\new_{kind}_{suffix}({sig}, float* ALIAS y, '
                f"{ctype} n)\n{{\n    {kind}_body<{ctype}>({call_args});\n}}\n"
            )
            entries.append(entry if kind == "scalar" else f"#if VEC\n{entry}#endif\n")
    return fill(
        CUDA_KERNEL,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        ITEMS=params["items"],
        VEC=c_bool(params["vec4"]),
        FAST=c_bool(params["fast_math"]),
        INPLACE=c_bool(inplace),
        MATH=CUDA_MATH,
        COMMON=COMMON,
        APPLY=apply,
        PARAMS_T=params_t,
        DECL_S=decl_s,
        LOAD_S=load_s,
        CALL_S=call([f"v{k}[k]" for k in range(nf)], "i"),
        DECL_V=decl_v,
        LOAD_V=load_v,
        CALL_X=call([f"v{k}[k].x" for k in range(nf)], "e"),
        CALL_Y=call([f"v{k}[k].y" for k in range(nf)], "e + 1"),
        CALL_Z=call([f"v{k}[k].z" for k in range(nf)], "e + 2"),
        CALL_W=call([f"v{k}[k].w" for k in range(nf)], "e + 3"),
        CALL_S_TAIL=call([f"f{k}[i]" for k in range(nf)], "i"),
        ENTRIES="\n".join(entries),
    )


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _py_block(lines: list[str], indent: int = 8) -> str:
    return "\n".join(" " * indent + line for line in lines)


def _spec_of(params: Params, template: str) -> dict[str, Any]:
    if not params.get("spec"):
        raise ValueError(f"{template} renders the problem's own expression: it needs the problem's spec")
    return load(params["spec"])


def render_cuda(params: Params, summary: str, template: str, epilogue: bool) -> str:
    spec = _spec_of(params, template)
    if epilogue and params["bias"] == "tail":
        spec = tail_bias(spec)
    inplace = bool(epilogue and params["inplace"])
    fw = _Forward(spec, "cuda")
    lines, full_ptrs, band_args = fw.lines(params, epilogue)
    lines.append(f"_launch(n, {_tuple(full_ptrs)}, {_tuple(band_args)}, out.data_ptr(), out.device)")
    lines.append("return out")
    imports = "import math\n\nimport cupy\nimport torch\nimport torch.nn as nn\n"
    if epilogue:
        imports += "import torch.nn.functional as F\n"
    return fill(
        CUDA_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        EXPR=_doc_expr(spec, params),
        IMPORTS=imports,
        CUDA_SRC=_cuda_kernel(spec, params, summary, inplace),
        BLOCK=params["block"],
        ITEMS=params["items"],
        WAVES=params["grid"],
        VEC_PY=repr(bool(params["vec4"])),
        INIT=repr(spec["init"]),
        PARAMS_SHAPES=repr(spec["params"]),
        BANDS=fw.band_shapes(),
        BAND_PY=BAND_PY,
        CLASS_DOC=_class_doc(spec, epilogue),
        INIT_BODY=INIT_PY,
        ARGS=", ".join(f"x{k}: torch.Tensor" for k in range(fw.n_in)),
        FORWARD=_py_block(lines),
    )


def _class_doc(spec: dict[str, Any], epilogue: bool) -> str:
    if epilogue:
        return "The problem's heavy op through torch, then its whole pointwise tail as one kernel."
    return "The problem's pointwise chain as one kernel; same constructor arguments as the problem's Model."


# -------------------------------------------------------------------------------------------- CPU

CPU_C = r"""
/* Fused pointwise chain: y[i] = ew_apply(full operands at i, broadcast operands at (i / inner) % size).
@SUMMARY_C@ */
#ifndef PARALLEL
#define PARALLEL @PARALLEL@      /* OpenMP over contiguous ranges (single-threaded below PAR_MIN elements) */
#endif
#ifndef CHUNK
#define CHUNK @CHUNK@         /* elements per OpenMP task; 0: one contiguous range per thread */
#endif
#ifndef INPLACE
#define INPLACE @INPLACE@        /* y is the first full operand's buffer (the heavy op's result) */
#endif
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
"""

CPU_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters (besides the problem's spec): @PARAMS@.

Computes:
@EXPR@
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_run = _bind().ew_run
_F32 = torch.float32
_INIT = @INIT@  # the constructor arguments this candidate was generated for
_PARAMS = @PARAMS_SHAPES@  # the reference's parameters this candidate reads, by state_dict name
_BANDS = @BANDS@  # broadcast operands' shapes as the reference used them
@BAND_PY@

class ModelNew(nn.Module):
    """@CLASS_DOC@"""

    def __init__(self, *args):
@INIT_BODY@

    def forward(self, @ARGS@) -> torch.Tensor:
        # Kept lean on purpose: each torch or extension call costs microseconds when the caches are cold.
@FORWARD@
'''


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
    spec = _spec_of(params, template)
    if epilogue and params["bias"] == "tail":
        spec = tail_bias(spec)
    inplace = bool(epilogue and params["inplace"])
    fw = _Forward(spec, "cpu")
    lines, full_ptrs, band_args = fw.lines(params, epilogue)
    lines.append(f"_run({', '.join([*full_ptrs, *band_args, 'out.data_ptr()', 'n'])})")
    lines.append("return out")
    e = fw.expr
    signature = "p" * len(e.full) + "pii" * len(e.bands) + "pi"
    binding = binding_block(template, {"ew_run": (signature, "")}, params["binding"])
    imports = _cpu_imports(params["binding"], epilogue)
    return fill(
        CPU_PY,
        TEMPLATE=template,
        SUMMARY_DOC=wrap(summary),
        PARAMS=_params_text(params),
        EXPR=_doc_expr(spec, params),
        IMPORTS=imports,
        C_SRC=_cpu_c(spec, params, summary, inplace),
        BINDING=binding,
        INIT=repr(spec["init"]),
        PARAMS_SHAPES=repr(spec["params"]),
        BANDS=fw.band_shapes(),
        BAND_PY=BAND_PY,
        CLASS_DOC=_class_doc(spec, epilogue),
        INIT_BODY=INIT_PY,
        ARGS=", ".join(f"x{k}: torch.Tensor" for k in range(fw.n_in)),
        FORWARD=_py_block(lines),
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


def _params_text(params: Params) -> str:
    return wrap(", ".join(f"{k}={v!r}" for k, v in sorted(params.items()) if k != "spec"))


def render_elementwise_cuda(params: Params, summary: str) -> str:
    return render_cuda(params, summary, "elementwise_cuda", epilogue=False)


def render_epilogue_cuda(params: Params, summary: str) -> str:
    return render_cuda(params, summary, "epilogue_cuda", epilogue=True)


def render_elementwise_cpu(params: Params, summary: str) -> str:
    return render_cpu(params, summary, "elementwise_cpu", epilogue=False)


def render_epilogue_cpu(params: Params, summary: str) -> str:
    return render_cpu(params, summary, "epilogue_cpu", epilogue=True)
