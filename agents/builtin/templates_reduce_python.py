"""The Python parts every reduce and RMSNorm candidate shares: how it finds its layout at run time, the words
of its docstring, and the RMSNorm module that holds the reference's weight.

Both families see the input as ``(outer, reduced, inner)`` (``agents.builtin.recognise_reduce``); the kernels
are in ``templates_reduce_cuda``, ``templates_reduce_cpu``, ``templates_rmsnorm_cuda`` and
``templates_rmsnorm_cpu``. Every candidate file is complete: the kernel source is one raw string literal whose
``#ifndef`` defaults are the chosen parameters, like the other CUDA and CPU templates.
"""

from __future__ import annotations

import json
from typing import Any

from agents.builtin._text import fill, wrap
from agents.builtin._text import params_text as shared_params_text
from agents.builtin.recognise_reduce import NORMS

OP_CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "argmin": 5}

# How a candidate finds (outer, reduced, inner) and the output shape from the input's shape at run time,
# so that it works for any sizes (the harness also runs it on a second, smaller shape).
# Worked out once per input shape: the harness counts every call's host time.
LAYOUT_PY = r'''
@functools.lru_cache(maxsize=64)
def _layout(shape: tuple[int, ...]) -> tuple[int, int, int, tuple[int, ...]]:
    """(outer, reduced, inner, output shape) of a reduction of ``shape`` over DIMS (None: every dim)."""
    nd = len(shape)
    dims = sorted({d % nd for d in DIMS}) if DIMS and nd else list(range(nd))
    if not dims:
        return 1, 1, 1, ()
    lo, hi = dims[0], dims[-1]
    if dims != list(range(lo, hi + 1)):
        raise ValueError(f"dims {DIMS} of a {nd}-d input are not contiguous")
    outer = reduced = inner = 1
    for i, d in enumerate(shape):
        if i < lo:
            outer *= d
        elif i <= hi:
            reduced *= d
        else:
            inner *= d
    if KEEPDIM:
        out_shape = tuple(1 if lo <= i <= hi else d for i, d in enumerate(shape))
    else:
        out_shape = tuple(d for i, d in enumerate(shape) if not lo <= i <= hi)
    return outer, reduced, inner, out_shape
'''

WHAT = {
    "sum": "sum",
    "mean": "mean",
    "max": "maximum (values)",
    "min": "minimum (values)",
    "argmax": "argmax (int64 indices, first occurrence on ties)",
    "argmin": "argmin (int64 indices, first occurrence on ties)",
}


def spec_of(params: dict[str, Any]) -> dict[str, Any]:
    return json.loads(params.get("spec") or "{}")


def dims_text(dims: list[int] | None) -> str:
    return "every dim" if not dims else ("dim " if len(dims) == 1 else "dims ") + ", ".join(map(str, dims))


def about(params: dict[str, Any], device: str) -> str:
    """The candidate docstring's line on what it computes."""
    spec = spec_of(params)
    what = WHAT[params.get("op") or "sum"]
    keepdim = bool(spec.get("keepdim", False))
    dims = dims_text(spec.get("dims"))
    return wrap(f"The {what} of a float32 {device} tensor over {dims} (keepdim={keepdim}), as the problem's Model.")


def params_text(params: dict[str, Any]) -> str:
    return shared_params_text(params, hidden=("spec", "op"))


def rows_constants(params: dict[str, Any]) -> str:
    """The Python constants of a rows kernel's launch (``tpr`` threads per row)."""
    block, tpr = params["block"], params["tpr"]
    return f"_BLOCK, _ROWS_PER_BLOCK, _SPLIT = {block}, {block // tpr}, {params['split']}\n"


def inner_constants(params: dict[str, Any], split: bool) -> str:
    """The Python constants of a strided kernel's launch (``bx`` x ``by`` threads, a split when it has one)."""
    names, values = "_BX, _BY", f"{params['bx']}, {params['by']}"
    if split:
        names, values = f"{names}, _SPLIT", f"{values}, {params['split']}"
    return f"{names} = {values}\n_VEC = {params['vec4']!r}  # float4 columns when the inner dim is a multiple of 4\n"


# ----------------------------------------------------------------------------------------- RMSNorm

# The module part every RMSNorm candidate shares: the weight (if the reference has one) at the reference's own
# path, so that the harness copies it by name, and the layout of the normalised dims.
RMS_MODULE_PY = r'''DIMS = @DIMS@  # the normalised dims, as the reference names them
EPS = @EPS@
@LAYOUT@

class ModelNew(nn.Module):
    """Same constructor arguments as the problem's Model; what they choose (eps, the dims, the weight's shape)
    was read when this file was written, so the arguments are accepted and not needed."""

    def __init__(self, *init_args: object, **init_kwargs: object):
        super().__init__()
@WEIGHT_INIT@
'''


def weight_parts(params: dict[str, Any]) -> tuple[str, str, str]:
    """(constructor lines, the forward's weight expression, words) for the reference's weight, if any.

    The weight sits at the reference's dotted path (e.g. ``norm.weight``: a plain ``nn.Module`` named ``norm``
    holding ``weight``), so ``state_dict`` keys match and the harness copies the reference's values.
    """
    spec = spec_of(params)
    path, shape = spec.get("weight"), tuple(spec.get("wshape") or ())
    if not path:
        return "", "None", ""
    parts = path.split(".")
    lines = [
        "        # The reference's weight, at its own path so that the harness copies it by name (nn.RMSNorm's "
        "init: ones).",
    ]
    for i in range(1, len(parts)):
        lines.append(f"        self.{'.'.join(parts[:i])} = nn.Module()")
    lines.append(f"        self.{path} = nn.Parameter(torch.ones({shape!r}))")
    # Parameters are created contiguous and only ever updated in place.
    return "\n".join(lines) + "\n", f"self.{path}.detach()", " * weight"


def norm_of(params: dict[str, Any]) -> tuple[int, str, str]:
    """What an RMSNorm template point computes: (NORM code, name, formula) from ``recognise_reduce.NORMS``."""
    return NORMS[params.get("op") or "rms"]


def norm_code(params: dict[str, Any]) -> int:
    """The RMSNorm templates' NORM: which normalisation the kernel computes."""
    return norm_of(params)[0]


def formula(params: dict[str, Any]) -> str:
    """The candidate docstring's line on what it computes, e.g. ``RMSNorm: y = x / sqrt(mean(...) + eps)``."""
    _, name, text = norm_of(params)
    return f"{name}: {text.format(dims=dims_text(spec_of(params).get('dims')))}"


def rms_module(params: dict[str, Any]) -> str:
    init, _, _ = weight_parts(params)
    return fill(
        RMS_MODULE_PY,
        DIMS=repr(spec_of(params).get("dims")),
        EPS=repr(float(params.get("eps", 1e-5))),
        LAYOUT=LAYOUT_PY,
        WEIGHT_INIT=init,
    )
