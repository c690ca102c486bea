"""A pointwise chain's JSON spec (``agents.builtin.pointwise``) compiled to one C function ``ew_apply`` of the
operands' values at one output element, and the chain in words.
"""

from __future__ import annotations

import math
from typing import Any

from agents.builtin._text import c_float
from agents.builtin.pointwise_trace import BOOL_OPS, TRANSCENDENTAL


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


def long_chain(spec: dict[str, Any]) -> bool:
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
