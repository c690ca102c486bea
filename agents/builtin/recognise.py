"""Which builtin family a problem belongs to, and the shape facts the catalog plans with.

The family comes from the aten ops the reference runs (``ProblemInfo.aten_ops``): exactly one
``aten._softmax``, ``aten.native_layer_norm``, ``aten.mm`` or ``aten.bmm`` and nothing else (but transposes of
the inputs ``aten.mm`` multiplies, ``Shape.spec`` says which, or the views of ``torch.matmul`` of an N-D tensor
by a matrix), on fp32 tensors whose shapes fit the family, and a constructor the templates reproduce (no
arguments, or the normalized_shape of a LayerNorm). The op's own arguments (softmax dim, LayerNorm eps) are not in
``ProblemInfo``; when the problem file is readable they are read from one forward pass on meta tensors,
and a softmax over any dim but the last is not recognised. ``aten._log_softmax`` is the softmax family with
``Shape.op == "log_softmax"``. Reductions over one dim ("reduce"), RMSNorm and L1/L2 normalisation (the
layernorm family with ``op`` "rms", "l1", "l1_mean" or "l2") are recognised from an ordered op trace in
``recognise_reduce.py``. A chain of pointwise ops ("elementwise"), or one matmul / linear / convolution followed
by one ("epilogue"), is traced into an expression by ``pointwise.py`` (``Shape.spec``).
"""

from __future__ import annotations

import ast
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tools.problem import ProblemInfo, TensorSpec

FAMILIES = ("softmax", "layernorm", "matmul", "reduce", "elementwise", "epilogue")
_FAMILY_OF_OP = {
    "aten._softmax.default": "softmax",
    "aten._log_softmax.default": "softmax",  # Shape.op "log_softmax"
    "aten.native_layer_norm.default": "layernorm",
    "aten.mm.default": "matmul",
    "aten.bmm.default": "matmul",
}


@dataclass(frozen=True)
class Shape:
    """The facts about one problem that the catalog plans with."""

    family: str
    rows: int = 0  # softmax / layernorm: independent rows ...
    cols: int = 0  # ... of this many elements (softmax: the last dim; layernorm: prod(normalized_shape))
    batch: int = 1  # matmul: C[b] = A[b] @ B[b], A (m, k), B (k, n)
    m: int = 0
    k: int = 0
    n: int = 0
    eps: float = 1e-5  # layernorm
    # Family-specific facts for the newer families, kept hashable: the operation's variant (e.g. "log_softmax",
    # "rms", "sum", "argmax"), the size of the dims after a reduced one, and a JSON spec the renderers take
    # (e.g. an elementwise expression). Defaults mean "the plain op over the last dim".
    op: str = ""
    inner: int = 1
    spec: str = ""

    def extras(self) -> dict[str, Any]:
        """Problem facts every template of this family receives as (unsearched) params."""
        out: dict[str, Any] = {}
        if self.family == "layernorm" and self.eps != 1e-5:
            out["eps"] = self.eps
        if self.op:
            out["op"] = self.op
        if self.spec:
            out["spec"] = self.spec
        return out

    @property
    def elements(self) -> int:
        return self.rows * self.cols * self.inner if self.family != "matmul" else self.batch * self.m * self.n

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def row_bytes(self) -> int:
        return 4 * self.cols


def recognise(info: ProblemInfo) -> str | None:
    """The family of ``info`` ("softmax", "layernorm", "matmul"), or None when no template applies."""
    shape = analyse(info)
    return shape.family if shape else None


def analyse(info: ProblemInfo) -> Shape | None:
    """The family and shape facts of ``info``, or None when no builtin template applies."""
    # Reductions over a dim and RMSNorm need the op trace's arguments and dataflow (recognise_reduce.py,
    # imported here because it builds on Shape).
    from agents.builtin import recognise_reduce

    reduced = (
        recognise_reduce.analyse_reduce(info)
        or recognise_reduce.analyse_rms(info)
        or recognise_reduce.analyse_norm(info)
    )
    if reduced is not None:
        return reduced
    # A chain of pointwise ops, alone or after one matmul / linear / convolution (pointwise.py traces it).
    from agents.builtin.pointwise import analyse_pointwise

    fused = analyse_pointwise(info)
    if fused is not None:
        family, spec, facts = fused
        return Shape(family, spec=spec, **facts)
    ops = dict(info.aten_ops)
    transposed, flattened = (False, False), False
    if ops == _FLATTENED_MM:
        if not _flattened_matmul(info):
            return None
        flattened, ops = True, {"aten.mm.default": 1}
    elif len(ops) > 1 and ops.get("aten.mm.default") == 1:
        found = _transposed_operands(info)  # torch.matmul(A.T, B) and the like
        if found is None:
            return None
        transposed, ops = found, {"aten.mm.default": 1}
    if len(ops) != 1:
        return None
    ((op, count),) = ops.items()
    family = _FAMILY_OF_OP.get(op)
    if family is None or count != 1:
        return None
    tensors = [s for s in info.inputs if isinstance(s, TensorSpec)]
    if len(tensors) != len(info.inputs) or len(info.outputs) != 1:
        return None  # scalar inputs would be constructor-like knobs the templates do not take
    if any(t.dtype != "float32" for t in [*tensors, *info.outputs]):
        return None
    init = _literal(info.init_inputs)
    out = info.outputs[0].shape
    if family == "softmax":
        return _softmax(info, tensors, out, init, "log_softmax" if op == "aten._log_softmax.default" else "")
    if family == "layernorm":
        return _layernorm(info, tensors, out, init)
    return _matmul(op, tensors, out, init, transposed, flattened)


# torch.matmul of an N-D tensor by a matrix runs as one aten.mm of the tensor's leading dims flattened.
_FLATTENED_MM = {"aten.view.default": 1, "aten.mm.default": 1, "aten._unsafe_view.default": 1}


def _ref_is(a: Any, kind: str, key: Any) -> bool:
    """Is the traced argument ``a`` the input ``key`` (kind "input") or node ``key``'s output (kind "node")?"""
    from agents.builtin.recognise_reduce import Ref

    return isinstance(a, Ref) and a.kind == kind and a.key == key


def _flattened_matmul(info: ProblemInfo) -> bool:
    """Do the reference's ops (``_FLATTENED_MM``) flatten input 0, multiply it by input 1 and give that back?"""
    from agents.builtin.recognise_reduce import trace

    tr = trace(info.path, info.sha256)
    if tr is None or len(tr.outputs) != 1 or [n.op for n in tr.nodes] != list(_FLATTENED_MM):
        return False
    view, mm, unview = tr.nodes
    return (
        bool(view.args and unview.args)
        and _ref_is(view.args[0], "input", 0)
        and len(mm.args) == 2
        and _ref_is(mm.args[0], "node", (0, 0))
        and _ref_is(mm.args[1], "input", 1)
        and _ref_is(unview.args[0], "node", (1, 0))
        and _ref_is(tr.outputs[0], "node", (2, 0))
    )


_TRANSPOSES = {"aten.permute.default", "aten.t.default", "aten.transpose.int"}


def _transposed_operands(info: ProblemInfo) -> tuple[bool, bool] | None:
    """Which of the two 2-D inputs ``aten.mm`` multiplies transposed, when the reference transposes them and does
    nothing else (``torch.matmul(A.T, B)``, ``A @ B.t()``, ``torch.mm(A.transpose(0, 1), B.T)``); else None."""
    from agents.builtin.recognise_reduce import trace

    if set(info.aten_ops) - {"aten.mm.default"} - _TRANSPOSES:
        return None
    tr = trace(info.path, info.sha256)
    if tr is None or len(tr.outputs) != 1 or not tr.nodes or tr.nodes[-1].op != "aten.mm.default":
        return None
    *transposes, mm = tr.nodes
    flipped: dict[int, int] = {}  # transpose node -> the input it transposes
    for i, node in enumerate(transposes):
        x = node.args[0] if node.args else None
        if not any(_ref_is(x, "input", j) for j in (0, 1)) or len(x.shape) != 2 or not _swaps(node):
            return None
        flipped[i] = x.key
    if not _ref_is(tr.outputs[0], "node", (len(tr.nodes) - 1, 0)) or len(mm.args) != 2:
        return None
    transposed = []
    for position, a in enumerate(mm.args):  # mm(A or A.T, B or B.T): input 0 first, input 1 second
        if _ref_is(a, "input", position):
            transposed.append(False)
        elif any(_ref_is(a, "node", (i, 0)) for i, j in flipped.items() if j == position):
            transposed.append(True)
        else:
            return None
    if sum(transposed) != len(transposes):
        return None  # a transpose whose result the product does not use
    return transposed[0], transposed[1]


def _swaps(node: Any) -> bool:
    """Is ``node`` (on a 2-D tensor) a swap of its two dims?"""
    if node.op == "aten.t.default":
        return len(node.args) == 1
    if node.op == "aten.permute.default":
        return len(node.args) == 2 and [d % 2 for d in node.args[1]] == [1, 0]
    return len(node.args) == 3 and sorted(d % 2 for d in node.args[1:]) == [0, 1]  # transpose.int(x, d0, d1)


def _softmax(info: ProblemInfo, tensors: list[TensorSpec], out: list[int], init: Any, op: str = "") -> Shape | None:
    if init != [] or len(tensors) != 1 or tensors[0].shape != out or not out:
        return None
    probed = _probe(info.path, info.sha256)
    if probed is not None:
        dim = probed.get("softmax_dim")
        if dim is None or dim % len(out) != len(out) - 1:
            return None
    cols = out[-1]
    return Shape("softmax", rows=math.prod(out) // cols if cols else 0, cols=cols, op=op)


def _layernorm(info: ProblemInfo, tensors: list[TensorSpec], out: list[int], init: Any) -> Shape | None:
    if not (isinstance(init, list) and len(init) == 1) or len(tensors) != 1 or tensors[0].shape != out:
        return None
    normalized = init[0]
    if isinstance(normalized, int):
        normalized = [normalized]
    if not (isinstance(normalized, list | tuple) and normalized and all(isinstance(d, int) for d in normalized)):
        return None
    normalized = list(normalized)
    if len(normalized) > len(out) or out[len(out) - len(normalized) :] != normalized:
        return None
    cols = math.prod(normalized)
    if info.n_parameters not in (0, 2 * cols):
        return None  # the templates hold exactly an elementwise weight and bias (or none)
    eps = 1e-5
    probed = _probe(info.path, info.sha256)
    if probed is not None:
        if probed.get("normalized_shape") not in (None, normalized):
            return None
        eps = probed.get("eps", eps)
    return Shape("layernorm", rows=math.prod(out) // cols if cols else 0, cols=cols, eps=eps)


def _matmul(
    op: str,
    tensors: list[TensorSpec],
    out: list[int],
    init: Any,
    transposed: tuple[bool, bool] = (False, False),
    flattened: bool = False,
) -> Shape | None:
    if init != [] or len(tensors) != 2:
        return None
    a, b = tensors[0].shape, tensors[1].shape
    if flattened:  # A (..., K) and the output (..., N) as the rows aten.mm multiplied
        if len(a) < 3 or len(out) != len(a):
            return None
        a, out = [math.prod(a[:-1]), a[-1]], [math.prod(out[:-1]), out[-1]]
    if any(transposed):  # the product's operands: the inputs as the reference transposed them
        a, b = (a[::-1] if transposed[0] else a), (b[::-1] if transposed[1] else b)
        spec = json.dumps({"transposed": list(transposed)})
    else:
        spec = ""
    if op == "aten.mm.default" and len(a) == 2 and len(b) == 2 and a[1] == b[0] and out == [a[0], b[1]]:
        return Shape("matmul", batch=1, m=a[0], k=a[1], n=b[1], spec=spec)
    if (
        op == "aten.bmm.default"
        and len(a) == 3
        and len(b) == 3
        and a[0] == b[0]
        and a[2] == b[1]
        and out == [a[0], a[1], b[2]]
    ):
        return Shape("matmul", batch=a[0], m=a[1], k=a[2], n=b[2])
    return None


def _literal(text: str) -> Any:
    """``init_inputs`` is the repr of a list; tuples become lists so that comparisons are simple."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None

    def lists(v: Any) -> Any:
        return [lists(x) for x in v] if isinstance(v, list | tuple) else v

    return lists(value)


class _ArgRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, Any] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in ("aten._softmax.default", "aten._log_softmax.default"):
            self.found["softmax_dim"] = int(args[1])
        elif name == "aten.native_layer_norm.default":
            self.found["normalized_shape"] = [int(d) for d in args[1]]
            self.found["eps"] = float(args[4])
        return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=64)
def _probe(path: str, sha256: str) -> dict[str, Any] | None:
    """The softmax dim / LayerNorm normalized_shape and eps, from a forward pass on meta tensors.

    None when the file is unreadable or does not run on meta: the caller then trusts ``ProblemInfo``.
    ``sha256`` is part of the cache key so an edited file is probed again.
    """
    from tools.problem import build_model, exec_source

    try:
        source = Path(path).read_text(encoding="utf-8")
        module = exec_source(source, path, "probe")
        init = list(module.get_init_inputs())
        with torch.device("meta"):
            inputs = list(module.get_inputs())
        model = build_model(module.Model, init, "meta", seed=0)
        recorder = _ArgRecorder()
        with torch.no_grad(), recorder:
            model(*inputs)
    except Exception:  # a problem the probe cannot run on meta is simply not recognised: the reference stands
        return None
    return recorder.found
