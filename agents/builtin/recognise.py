"""Which builtin family a problem belongs to, and the shape facts the catalog plans with.

The family comes from the aten ops the reference runs (``ProblemInfo.aten_ops``): exactly one
``aten._softmax``, ``aten.native_layer_norm``, ``aten.mm`` or ``aten.bmm`` and nothing else (but views around
one product that read input 0 as A or A.T, its leading dims flattened, and input 1 as B or B.T:
``torch.matmul(A.T, B)``, an N-D A, ``torch.einsum("bijl,lk->bijk", A, B)``; ``Shape.spec`` says what is
transposed), on fp32 tensors whose shapes fit the family, and a constructor the templates reproduce (no
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
from pathlib import Path
from typing import Any

import structlog
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from agents.builtin import recognise_reduce
from agents.builtin.shape import Shape
from tools.problem import ProblemInfo, TensorSpec

log = structlog.get_logger(__name__)

FAMILIES = ("softmax", "layernorm", "matmul", "reduce", "elementwise", "epilogue")
_FAMILY_OF_OP = {
    "aten._softmax.default": "softmax",
    "aten._log_softmax.default": "softmax",  # Shape.op "log_softmax"
    "aten.native_layer_norm.default": "layernorm",
    "aten.mm.default": "matmul",
    "aten.bmm.default": "matmul",
}


def recognise(info: ProblemInfo) -> str | None:
    """The family of ``info`` ("softmax", "layernorm", "matmul"), or None when no template applies."""
    shape = analyse(info)
    return shape.family if shape else None


def analyse(info: ProblemInfo) -> Shape | None:
    """The family and shape facts of ``info``, or None when no builtin template applies."""
    # Reductions over a dim and RMSNorm need the op trace's arguments and dataflow (recognise_reduce.py).
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
    if len(ops) > 1 and set(ops) - _PRODUCTS <= _VIEWS and sum(ops.get(p, 0) for p in _PRODUCTS) == 1:
        found = _matmul_views(info)  # torch.matmul(A.T, B), an N-D A, torch.einsum("bijl,lk->bijk", A, B)
        if found is None:
            return None
        (transposed, flattened), ops = found, {"aten.mm.default": 1}
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


_PRODUCTS = {"aten.mm.default", "aten.bmm.default"}
# Ops that only re-view memory: around one product they change which elements it reads, never their values.
_VIEWS = {
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default",
    "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.permute.default", "aten.t.default",
    "aten.transpose.int", "aten.expand.default", "aten.alias.default",
}  # fmt: skip


def _matmul_views(info: ProblemInfo) -> tuple[tuple[bool, bool], bool] | None:
    """((A transposed, B transposed), A's leading dims flattened) when the reference's one product (``aten.mm``, or
    ``aten.bmm`` of batch 1) reads, through views only, input 0 as A (its leading dims flattened) or A.T and input
    1 as B or B.T, and returns it as is or re-viewed to A's leading dims; else None.

    The views are judged by what the product reads: each operand's memory, offset and strides on meta tensors.
    """
    found = _probe(info.path, info.sha256) or {}
    if "operands" not in found or "result" not in found or len(info.inputs) != 2:
        return None
    (xi, xs, xst, xo), (wi, ws, wst, wo) = found["operands"]
    if (xi, wi) != (0, 1) or xo or wo or len(xs) != len(ws):
        return None
    if len(xs) == 3:  # torch.einsum multiplies through a bmm of batch 1
        if xs[0] != 1 or ws[0] != 1:
            return None
        xs, xst, ws, wst = xs[1:], xst[1:], ws[1:], wst[1:]
    a, b = list(info.inputs[0].shape), list(info.inputs[1].shape)
    (m, k), (k2, n) = xs, ws
    if k != k2 or len(b) != 2:
        return None
    if _strided(xs, xst, (k, 1)) and a[-1] == k and math.prod(a) == m * k:
        ta = False  # row-major: A, or A with its leading dims flattened
    elif _strided(xs, xst, (1, m)) and a == [k, m]:
        ta = True
    else:
        return None
    if _strided(ws, wst, (n, 1)) and b == [k, n]:
        tb = False
    elif _strided(ws, wst, (1, k)) and b == [n, k]:
        tb = True
    else:
        return None
    reads_product, contiguous, out = found["result"]
    if not (reads_product and contiguous and out == ([m, n] if ta else [*a[:-1], n])):
        return None
    return (ta, tb), len(a) > 2


def _strided(shape: list[int], stride: list[int], want: tuple[int, ...]) -> bool:
    """Are ``stride`` the strides ``want`` (a size-1 dim's stride does not matter)?"""
    return all(d == 1 or s == w for d, s, w in zip(shape, stride, want, strict=True))


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
    def __init__(self, inputs: list[Any]) -> None:
        super().__init__()
        self.found: dict[str, Any] = {}
        # Contiguous tensor inputs by the memory they hold: an operand reading it is the input or a view of it.
        self.memory = {
            x.untyped_storage()._cdata: k
            for k, x in enumerate(inputs)
            if isinstance(x, torch.Tensor) and x.is_contiguous() and x.storage_offset() == 0
        }
        self.product: torch.Tensor | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        out = func(*args, **(kwargs or {}))
        if name in ("aten._softmax.default", "aten._log_softmax.default"):
            self.found["softmax_dim"] = int(args[1])
        elif name == "aten.native_layer_norm.default":
            self.found["normalized_shape"] = [int(d) for d in args[1]]
            self.found["eps"] = float(args[4])
        elif name in _PRODUCTS:
            self.found["operands"] = [self.operand(x) for x in args[:2]]
            self.product = out
        return out

    def operand(self, x: torch.Tensor) -> list[Any]:
        """[input index or -1, shape, strides, storage offset] of a product's operand."""
        k = self.memory.get(x.untyped_storage()._cdata, -1)
        return [k, list(x.shape), list(x.stride()), x.storage_offset()]

    def returned(self, y: Any) -> None:
        """What forward returned, against the product: [reads its memory, contiguous, shape]."""
        if self.product is not None and isinstance(y, torch.Tensor):
            same = y.untyped_storage()._cdata == self.product.untyped_storage()._cdata
            self.found["result"] = [same and y.storage_offset() == 0, y.is_contiguous(), list(y.shape)]


@functools.lru_cache(maxsize=64)
def _probe(path: str, sha256: str) -> dict[str, Any] | None:
    """The softmax dim / LayerNorm normalized_shape and eps, and what a matmul's one product reads and returns,
    from a forward pass on meta tensors.

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
        recorder = _ArgRecorder(inputs)
        with torch.no_grad(), recorder:
            recorder.returned(model(*inputs))
    except Exception as exc:  # a problem the probe cannot run on meta is not recognised: the reference stands
        log.info("meta_probe_failed", problem=path, error=f"{type(exc).__name__}: {exc}")
        return None
    return recorder.found
