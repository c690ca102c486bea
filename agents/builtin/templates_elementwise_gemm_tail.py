"""``epilogue_cuda_wgmma`` with ``tail="gemm"``: the pointwise tail applied by the wgmma GEMM to each value of C
before it is stored, so the output is written once and never read back. The tail's own kernel took 62.7 of
1398 µs on gemm_bias_relu (a pass over a 128 MiB output, bench/RESULTS.md); on matmul_gelu_scale's 256 MiB
output it is twice that.

A GEMM thread holds two rows x two adjacent columns of C at a time, so a broadcast operand the tail reads must be
one value per column of C (a linear layer's bias: anything shaped (N,)) or one value for all (a scalar parameter,
a number argument). A tail with another full operand or another broadcast keeps its own kernel
(``gemm_tail_fits``).
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill
from agents.builtin.pointwise import band
from agents.builtin.templates_elementwise_expression import Expression, long_chain
from agents.builtin.templates_elementwise_math import COMMON, CUDA_MATH
from agents.builtin.templates_elementwise_python import (
    CONSTANTS_PY,
    DOC_PY,
    MODEL_PY,
    Forward,
    Params,
    attr,
    candidate_fields,
    prepare,
)
from agents.builtin.templates_matmul_bf16x3 import LINEAR_BF16X3_PY
from agents.builtin.templates_matmul_wgmma import GemmTail, mm_module_py

TAIL_CU = c_params(r"""
#param FAST_MATH    // __expf / __logf / __fdividef instead of the full-precision functions
@MATH@
@COMMON@
@APPLY@
// The tail's broadcast operands: one value per column of C (read at the column) or one for all.
struct Tail {
@MEMBERS@
};

// Columns col and col + 1 of two rows of C through the tail (x: the upper row, y: the lower), each operand's
// values read once for both rows.
__device__ __forceinline__ void tail_apply(const Tail& t, float& x0, float& x1, float& y0, float& y1, int col)
{
@LOADS@
    x0 = ew_apply(@ARGS_X0@);
    x1 = ew_apply(@ARGS_X1@);
    y0 = ew_apply(@ARGS_Y0@);
    y1 = ew_apply(@ARGS_Y1@);
}""")

GEMM_TAIL_PY = (
    DOC_PY
    + r"""
import math

import cupy
import torch
import torch.nn as nn

@STREAM_PY@
@HEAVY_PY@

"""
    + CONSTANTS_PY
    + MODEL_PY
)


def band_kinds(spec: dict[str, Any]) -> list[str] | None:
    """``column`` or ``scalar`` for each broadcast operand of the tail (the bias already moved into it), or None when
    the GEMM cannot apply the tail: a full operand besides the heavy op's output, or another broadcast."""
    e = Expression(spec)
    if [e.leaves[j]["kind"] for j in e.full] != ["heavy"]:
        return None
    out = spec["out_shape"]
    kinds = []
    for j in e.bands:
        size, inner = band(e.leaves[j]["shape"], out)
        if size == 1:
            kinds.append("scalar")
        elif inner == 1 and size == out[-1]:
            kinds.append("column")
        else:
            return None
    return kinds


def gemm_tail_fits(params: Params) -> bool:
    """Whether the GEMM can apply this point's tail (its spec's, with the bias in the tail)."""
    spec, _, _ = prepare(params, "epilogue_cuda_wgmma", True, "cuda")
    return band_kinds(spec) is not None


def gemm_tail(spec: dict[str, Any], kinds: list[str], fast_math: bool) -> GemmTail:
    """The ``Tail`` and ``tail_apply`` the GEMM applies to C, from the tail's expression and ``band_kinds``."""
    loads = []
    for k, kind in enumerate(kinds):
        if kind == "column":
            loads.append(f"    const float w{k}_0 = __ldg(t.w{k} + col), w{k}_1 = __ldg(t.w{k} + col + 1);")
        else:
            loads.append(f"    const float w{k}_0 = __ldg(t.w{k}), w{k}_1 = w{k}_0;")
    expr = Expression(spec)
    # A long chain is called, not inlined, as in the tail's own kernel: inlined four times over it costs NVRTC time.
    apply = expr.function("__device__ __noinline__" if long_chain(spec) else "EW_FN")

    def args(value: str, column: int) -> str:
        return ", ".join([value] + [f"w{k}_{column}" for k in range(len(kinds))])

    cu = fill(
        TAIL_CU,
        FAST_MATH=c_bool(fast_math),
        MATH=CUDA_MATH,
        COMMON=COMMON,
        APPLY=apply,
        MEMBERS="\n".join(f"    const float* w{k};" for k in range(len(kinds))),
        LOADS="\n".join(loads),
        ARGS_X0=args("x0", 0),
        ARGS_X1=args("x1", 1),
        ARGS_Y0=args("y0", 0),
        ARGS_Y1=args("y1", 1),
    )
    return GemmTail(
        cu=cu,
        params="".join(f", const float* __restrict__ w{k}" for k in range(len(kinds))),
        init=", ".join(f"w{k}" for k in range(len(kinds))),
        operands=len(kinds),
    )


def forward_lines(fw: Forward, kinds: list[str]) -> list[str]:
    """The forward: checks, each broadcast operand checked to be what the GEMM reads it as, then the GEMM."""
    h = fw.spec["heavy"]
    x, weight = f"x{h['x']}", attr(h["weight"])
    lines = fw.checks()
    lines.append(f"shape = (*{x}.shape[:-1], {weight}.shape[0])  # the output's")
    for k, kind in enumerate(kinds):
        lines.append(fw.band_operand(k, f"{x}.device"))
        lines.append(f"size{k}, inner{k} = _band({fw.band_shape(k)}, shape)")
        if kind == "column":
            lines.append(f"if (size{k}, inner{k}) != (shape[-1], 1):")
            lines.append(f'    raise ValueError("tail operand {k} is no longer one value per output column")')
        else:
            lines.append(f"if size{k} != 1:")
            lines.append(f'    raise ValueError("tail operand {k} is no longer one value")')
    tail = "".join(f", w{k}.data_ptr()" for k in range(len(kinds)))
    lines.append("# three bf16 products with the tail applied before the store: the output written once")
    lines.append(f"return _linear_bf16x3({x}, {weight}{tail})")
    return lines


def render_gemm_tail(params: Params, summary: str, gemm_point: Params) -> str:
    """The candidate: the wgmma GEMM at ``gemm_point`` (a ``matmul_cuda_wgmma`` point) with the tail in it; the
    forward only checks the operands and calls it."""
    spec, _, fw = prepare(params, "epilogue_cuda_wgmma", True, "cuda")
    kinds = band_kinds(spec)
    if kinds is None:
        raise ValueError("this tail reads operands other than per-column or scalar ones: it keeps its own kernel")
    tail = gemm_tail(spec, kinds, params["fast_math"])
    heavy = mm_module_py(gemm_point, summary, b_col=True, tail=tail) + LINEAR_BF16X3_PY
    fields = candidate_fields(params, summary, "epilogue_cuda_wgmma", True, fw, forward_lines(fw, kinds), True)
    fields["CLASS_DOC"] = "The problem's linear layer by three bfloat16 tensor-core products, its tail applied in them."
    return fill(GEMM_TAIL_PY, HEAVY_PY=heavy, **fields)
