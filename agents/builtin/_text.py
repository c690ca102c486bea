"""Small helpers shared by the template modules: placeholder filling and number formatting."""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from agents.builtin.candidate_python import FUNCTION_PY, STREAM_PY

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
# Snippets any template may name without passing them to ``fill``.
_SHARED = {"STREAM_PY": STREAM_PY, "FUNCTION_PY": FUNCTION_PY}

# The start of every LayerNorm candidate's module, CPU and CUDA alike: parameters stored where the
# reference keeps them (`ln.weight`, `ln.bias`), so the harness copies the reference's weights by name.
LAYERNORM_MODULE = '''class _Affine(nn.Module):
    """Holds the learnable weight and bias, initialised like nn.LayerNorm (ones / zeros)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))


class ModelNew(nn.Module):
    """LayerNorm over the trailing ``normalized_shape`` dims, same constructor as the problem's Model."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        # state_dict keys `ln.weight` and `ln.bias`: the reference's (its nn.LayerNorm is `self.ln`).
        self.ln = _Affine(self.normalized_shape)'''


def fill(text: str, **values: Any) -> str:
    """Replace every ``@NAME@`` in ``text`` by ``str(values[NAME])``; every placeholder must be given
    (the shared snippets of ``_SHARED`` are given always)."""
    values = {**_SHARED, **values}

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"template placeholder @{name}@ has no value")
        return str(values[name])

    return _PLACEHOLDER.sub(one, text)


def c_float(x: float) -> str:
    """A C float literal that round-trips ``x`` (``1e-05f``)."""
    text = repr(float(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def c_bool(flag: bool) -> str:
    return "1" if flag else "0"


def wrap(text: str, prefix: str = "", width: int = 100) -> str:
    """``text`` wrapped to ``width`` columns, every line starting with ``prefix``."""
    return "\n".join(prefix + line for line in textwrap.wrap(text, width - len(prefix), break_on_hyphens=False))


_PARAM_LINE = re.compile(r"^#param ([A-Z][A-Z0-9_]*)(.*)$", re.MULTILINE)


def transposed(params: dict[str, Any]) -> str:
    """A matmul wrapper's ``_TRANSPOSED`` literal: which operands the problem transposes (``Shape.spec``)."""
    spec = json.loads(params.get("spec") or "{}")
    return repr(tuple(bool(t) for t in spec.get("transposed", (False, False))))


def c_params(source: str) -> str:
    """``source`` with every ``#param NAME  // why`` line written out as the default a ``-DNAME=...`` build can
    override: ``#ifndef NAME`` / ``#define NAME @NAME@  // why`` / ``#endif`` (the spacing kept as written)."""
    return _PARAM_LINE.sub(lambda m: f"#ifndef {m[1]}\n#define {m[1]} @{m[1]}@{m[2]}\n#endif", source)


def params_text(params: dict[str, Any], hidden: tuple[str, ...] = ()) -> str:
    """A candidate docstring's ``Parameters:`` list: every searched value but the ``hidden`` problem facts."""
    return wrap(", ".join(f"{k}={v!r}" for k, v in sorted(params.items()) if k not in hidden))
