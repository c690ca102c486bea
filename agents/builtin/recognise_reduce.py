"""Recognising reductions over one dim, RMSNorm and L1/L2 normalisation, from an ordered op trace on meta tensors.

``ProblemInfo.aten_ops`` counts ops but loses their arguments and how they connect. Both families need
more: a reduction's dims and keepdim, and for RMSNorm the proof that the five or six ops the reference
runs really form ``x / sqrt(mean(x * x, dims) + eps) [* weight]`` (and not, say, a mean over one dim
divided into another tensor). ``trace`` runs the problem's forward once on meta tensors and records every
aten op with its arguments, tensors replaced by references to the input, a parameter or an earlier op.

Both families are modelled as ``(outer, reduced, inner)``: the reduced dims are contiguous, ``outer`` is
the product of the dims before them and ``inner`` of the dims after them (1 when they are the last ones).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from agents.builtin.shape import Shape
from tools.problem import ProblemInfo, TensorSpec

log = structlog.get_logger(__name__)

# aten overload -> (reduction, how its dims are given): "list" (a dim list, None or [] = all dims),
# "int" (one dim, None = all), "all" (no dim argument: every dim).
REDUCE_OPS: dict[str, tuple[str, str]] = {
    "aten.sum.dim_IntList": ("sum", "list"),
    "aten.sum.default": ("sum", "all"),
    "aten.mean.dim": ("mean", "list"),
    "aten.mean.default": ("mean", "all"),
    "aten.amax.default": ("max", "list"),
    "aten.amin.default": ("min", "list"),
    "aten.max.dim": ("max", "int"),
    "aten.min.dim": ("min", "int"),
    "aten.max.default": ("max", "all"),
    "aten.min.default": ("min", "all"),
    "aten.argmax.default": ("argmax", "int"),
    "aten.argmin.default": ("argmin", "int"),
}
REDUCTIONS = ("sum", "mean", "max", "min", "argmax", "argmin")
# The ops an RMSNorm written out by hand (or F.rms_norm / nn.RMSNorm, which decompose on meta) runs.
_RMS_OPS = {
    "aten.pow.Tensor_Scalar",
    "aten.mul.Tensor",
    "aten.mean.dim",
    "aten.add.Tensor",
    "aten.add.Scalar",
    "aten.add_.Tensor",
    "aten.add_.Scalar",
    "aten.sqrt.default",
    "aten.rsqrt.default",
    "aten.div.Tensor",
}
_FUSED_RMS = {"aten._fused_rms_norm.default", "aten.rms_norm.default"}
# The ops of x divided by a norm of itself over some dims: torch.norm / linalg.vector_norm (p=2, "fro"), or
# sum / mean of abs(x).
_NORM_OPS = {"aten.abs.default", "aten.sum.dim_IntList", "aten.mean.dim", "aten.linalg_vector_norm.default",
             "aten.div.Tensor"}  # fmt: skip
# Normalisations y = x * factor(s), s a sum over the normalised dims, that the RMSNorm templates compute (the
# layernorm family's Shape.op): op -> (the templates' NORM code, a name, the formula with {dims}).
NORMS: dict[str, tuple[int, str, str]] = {
    "rms": (0, "RMSNorm", "y = x / sqrt(mean(x^2 over {dims}) + eps)"),
    "l2": (1, "L2 normalisation", "y = x / sqrt(sum(x^2 over {dims}))"),
    "l1": (2, "L1 normalisation", "y = x / sum(|x| over {dims})"),
    "l1_mean": (3, "normalisation by the mean absolute value", "y = x / mean(|x| over {dims})"),
}


# ------------------------------------------------------------------------------------------ trace


@dataclass(frozen=True)
class Ref:
    """A tensor argument: the forward's input ``key`` (an index), a parameter (its dotted name), an earlier
    op's output (``key`` = (node index, output index)), or something else (a constant made inside forward)."""

    kind: str  # "input" | "param" | "node" | "other"
    key: Any
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[Any, ...]  # Ref for tensors, lists as tuples, other values as they were
    kwargs: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Trace:
    nodes: tuple[Node, ...]
    outputs: tuple[Ref, ...]  # what forward returned
    params: tuple[tuple[str, tuple[int, ...]], ...]  # every parameter of the model, with its shape


class _Tracer(TorchDispatchMode):
    def __init__(self, inputs: list[Any], params: dict[int, str]) -> None:
        super().__init__()
        self.nodes: list[Node] = []
        self.refs: dict[int, Ref] = {}
        self.alive: list[Any] = []  # keeps every tensor seen alive, so that no id() is reused
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                self.refs[id(x)] = _ref("input", i, x)
        self.params = params

    def ref(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            known = self.refs.get(id(value))
            if known is not None:
                return known
            name = self.params.get(id(value))
            return _ref("param", name, value) if name is not None else _ref("other", None, value)
        if isinstance(value, list | tuple):
            return tuple(self.ref(v) for v in value)
        return value

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        node = Node(str(func), tuple(self.ref(a) for a in args), tuple((k, self.ref(v)) for k, v in kwargs.items()))
        out = func(*args, **kwargs)
        index = len(self.nodes)
        self.nodes.append(node)
        flat, _ = tree_flatten(out)
        for j, t in enumerate(flat):
            if isinstance(t, torch.Tensor):
                # An in-place op returns its argument: that object now stands for this node's result.
                self.refs[id(t)] = _ref("node", (index, j), t)
                self.alive.append(t)
        self.alive.extend(a for a in args if isinstance(a, torch.Tensor))
        return out


def _ref(kind: str, key: Any, t: torch.Tensor) -> Ref:
    return Ref(kind, key, tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))


@functools.lru_cache(maxsize=64)
def trace(path: str, sha256: str) -> Trace | None:
    """The ordered aten ops of one forward pass on meta tensors; None when the file cannot run on meta.

    ``sha256`` is part of the cache key so an edited file is traced again.
    """
    from tools.problem import build_model, exec_source

    try:
        source = Path(path).read_text(encoding="utf-8")
        module = exec_source(source, path, "trace")
        init = list(module.get_init_inputs())
        with torch.device("meta"):
            inputs = list(module.get_inputs())
        model = build_model(module.Model, init, "meta", seed=0)
        params = {id(p): name for name, p in model.named_parameters()}
        tracer = _Tracer(inputs, params)
        with torch.no_grad(), tracer:
            result = model(*inputs)
        flat, _ = tree_flatten(result)
        outputs = tuple(tracer.ref(t) for t in flat if isinstance(t, torch.Tensor))
    except Exception as exc:  # a problem that does not run on meta is not recognised: the reference stands
        log.info("meta_trace_failed", problem=path, error=f"{type(exc).__name__}: {exc}")
        return None
    shapes = tuple((name, tuple(int(d) for d in p.shape)) for name, p in model.named_parameters())
    return Trace(tuple(tracer.nodes), outputs, shapes)


# ------------------------------------------------------------------------------------------ layout


def split_dims(shape: list[int] | tuple[int, ...], dims: list[int] | None) -> tuple[int, int, int, int, int] | None:
    """(outer, reduced, inner, first dim, last dim) for a reduction of ``shape`` over ``dims`` (None = all),
    or None when the dims are not one contiguous run (or out of range)."""
    nd = len(shape)
    if dims is None or len(dims) == 0:
        norm = list(range(nd))
    else:
        if any(not -max(nd, 1) <= d < max(nd, 1) for d in dims):
            return None
        norm = sorted({d % nd for d in dims}) if nd else []
        if len(norm) != len(dims):
            return None  # a dim named twice: torch refuses it too
    if not norm:
        return 1, 1, 1, 0, -1  # a 0-d tensor
    lo, hi = norm[0], norm[-1]
    if norm != list(range(lo, hi + 1)):
        return None
    return math.prod(shape[:lo]), math.prod(shape[lo : hi + 1]), math.prod(shape[hi + 1 :]), lo, hi


def reduced_shape(shape: list[int], dims: list[int] | None, keepdim: bool) -> list[int] | None:
    """The output shape of a reduction over ``dims`` (None or [] = all dims), as torch gives it."""
    parts = split_dims(shape, dims)
    if parts is None:
        return None
    lo, hi = parts[3], parts[4]
    if keepdim:
        return [1 if lo <= i <= hi else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if not lo <= i <= hi]


# --------------------------------------------------------------------------------------- reductions


def _only_tensor_input(info: ProblemInfo) -> TensorSpec | None:
    tensors = [s for s in info.inputs if isinstance(s, TensorSpec)]
    if len(tensors) != 1 or len(info.inputs) != 1 or tensors[0].dtype != "float32":
        return None
    return tensors[0]


def analyse_reduce(info: ProblemInfo) -> Shape | None:
    """A reduction (sum, mean, max, min, argmax, argmin) of one fp32 tensor over contiguous dims."""
    ops = dict(info.aten_ops)
    if len(ops) != 1:
        return None
    ((op, count),) = ops.items()
    kind = REDUCE_OPS.get(op)
    if kind is None or count != 1 or info.n_parameters != 0:
        return None
    x = _only_tensor_input(info)
    if x is None or len(info.outputs) != 1:
        return None
    reduction, dim_style = kind
    want_dtype = "int64" if reduction.startswith("arg") else "float32"
    if info.outputs[0].dtype != want_dtype:
        return None  # e.g. torch.max(x, dim)[1]: indices from max.dim, whose tie rule torch leaves open
    tr = trace(info.path, info.sha256)
    if tr is None or len(tr.nodes) != 1:
        return None
    node = tr.nodes[0]
    if not node.args or node.args[0] != Ref("input", 0, tuple(x.shape), "float32"):
        return None
    args = list(node.args[1:])
    kwargs = dict(node.kwargs)
    if kwargs.get("dtype") is not None:
        return None  # an accumulation dtype other than the input's: not what the templates compute
    if dim_style == "all":
        dims, keepdim = None, False
    else:
        dim = args[0] if args else kwargs.get("dim")
        keepdim = bool(args[1] if len(args) > 1 else kwargs.get("keepdim", False))
        if dim is None or (dim_style == "list" and len(dim) == 0):
            dims = None
        elif dim_style == "int":
            dims = [int(dim)]
        else:
            dims = [int(d) for d in dim]
    if len(tr.outputs) != 1 or not _is_node(tr.outputs[0], 0):
        return None  # forward must return the reduction's (first) result itself
    parts = split_dims(x.shape, dims)
    if parts is None or reduced_shape(x.shape, dims, keepdim) != info.outputs[0].shape:
        return None
    outer, reduced, inner, _, _ = parts
    if reduced >= 2**31:
        return None  # the kernels index the reduced dim with 32-bit integers
    spec = json.dumps({"dims": dims, "keepdim": keepdim, "strided": inner > 1}, sort_keys=True)
    return Shape("reduce", rows=outer, cols=reduced, inner=inner, op=reduction, spec=spec)


# ------------------------------------------------------------------------------------------ RMSNorm


def analyse_rms(info: ProblemInfo) -> Shape | None:
    """``x / sqrt(mean(x^2, dims, keepdim=True) + eps)`` (or ``x * rsqrt(...)``), optionally times a weight
    over the normalised dims, with the dims contiguous; a weight only when they are the last ones."""
    ops = set(info.aten_ops)
    if not ops or not (ops <= _RMS_OPS or (len(ops) == 1 and ops <= _FUSED_RMS)):
        return None
    if "aten.mean.dim" not in ops and not ops & _FUSED_RMS:
        return None
    x = _only_tensor_input(info)
    if x is None or len(info.outputs) != 1 or info.outputs[0].shape != x.shape or info.outputs[0].dtype != "float32":
        return None
    tr = trace(info.path, info.sha256)
    if tr is None or len(tr.outputs) != 1:
        return None
    found = _match_fused(tr) if ops & _FUSED_RMS else _match_rms(tr)
    if found is None:
        return None
    dims, eps, weight = found
    parts = split_dims(x.shape, dims)
    if parts is None:
        return None
    outer, reduced, inner, lo, hi = parts
    wshape: list[int] = []
    if weight is not None:
        wshape = list(dict(tr.params)[weight])
        # The weight multiplies elementwise over the normalised dims (broadcast over the others).
        if inner != 1 or wshape != list(x.shape[lo : hi + 1]):
            return None
        if not all(part.isidentifier() for part in weight.split(".")):
            return None  # e.g. a ModuleList index: the candidate could not name its parameter alike
    n_weights = math.prod(wshape) if weight is not None else 0
    if info.n_parameters != n_weights:
        return None  # parameters the computation does not use: the candidate would not hold them
    spec = json.dumps({"dims": dims, "strided": inner > 1, "weight": weight, "wshape": wshape}, sort_keys=True)
    return Shape("layernorm", rows=outer, cols=reduced, inner=inner, eps=float(eps), op="rms", spec=spec)


def analyse_norm(info: ProblemInfo) -> Shape | None:
    """``x / norm(x, dims)`` with the L2 norm (``torch.norm``, ``linalg.vector_norm``; over every dim: the
    Frobenius norm) or ``x / sum(|x|, dims)`` / ``x / mean(|x|, dims)``, the dims contiguous; no parameters."""
    ops = set(info.aten_ops)
    if "aten.div.Tensor" not in ops or not ops <= _NORM_OPS or info.n_parameters:
        return None
    x = _only_tensor_input(info)
    if x is None or len(info.outputs) != 1 or info.outputs[0].shape != x.shape or info.outputs[0].dtype != "float32":
        return None
    tr = trace(info.path, info.sha256)
    if tr is None or len(tr.outputs) != 1 or not _is_node(tr.outputs[0], len(tr.nodes) - 1):
        return None
    found = _match_norm(tr.nodes, len(x.shape))
    if found is None:
        return None
    dims, op = found
    parts = split_dims(x.shape, dims)
    if parts is None:
        return None
    outer, reduced, inner, _, _ = parts
    spec = json.dumps({"dims": dims, "strided": inner > 1, "weight": None, "wshape": []}, sort_keys=True)
    return Shape("layernorm", rows=outer, cols=reduced, inner=inner, eps=0.0, op=op, spec=spec)


def _match_norm(nodes: tuple[Node, ...], nd: int) -> tuple[list[int] | None, str] | None:
    """(dims, op) of ``norm = vector_norm(x, 2, dims, keepdim); x / norm`` or ``s = sum|mean(abs(x), dims,
    keepdim); x / s``; None for anything else (another order, another p, a dtype, an eps added...)."""

    def is_x(a: Any) -> bool:
        return isinstance(a, Ref) and a.kind == "input" and a.key == 0

    def arg(node: Node, i: int, name: str, default: Any = None) -> Any:
        return node.args[i] if len(node.args) > i else dict(node.kwargs).get(name, default)

    *head, last = nodes
    if last.op != "aten.div.Tensor" or len(last.args) != 2 or last.kwargs or not is_x(last.args[0]):
        return None
    if not _is_node(last.args[1], len(head) - 1):
        return None
    if len(head) == 1 and head[0].op == "aten.linalg_vector_norm.default":
        n = head[0]
        order = arg(n, 1, "ord", 2)
        if not is_x(arg(n, 0, "self")) or isinstance(order, bool) or order != 2 or arg(n, 4, "dtype") is not None:
            return None
        dims, keepdim, op = arg(n, 2, "dim"), arg(n, 3, "keepdim", False), "l2"
    elif len(head) == 2 and head[0].op == "aten.abs.default" and is_x(arg(head[0], 0, "self")):
        n = head[1]
        if n.op not in ("aten.sum.dim_IntList", "aten.mean.dim") or not _is_node(arg(n, 0, "self"), 0):
            return None
        if arg(n, 3, "dtype") is not None:
            return None
        dims, keepdim = arg(n, 1, "dim"), arg(n, 2, "keepdim", False)
        op = "l1" if n.op == "aten.sum.dim_IntList" else "l1_mean"
    else:
        return None
    if isinstance(dims, int):
        dims = (dims,)
    every = not dims or sorted({d % nd for d in dims}) == list(range(nd))
    if not keepdim and not every:
        return None  # the reduced result would broadcast against other dims than the ones it came from
    return (None if not dims else [int(d) for d in dims]), op


def _match_fused(tr: Trace) -> tuple[list[int], float, str | None] | None:
    """aten._fused_rms_norm(x, normalized_shape, weight, eps) / aten.rms_norm(...), when not decomposed."""
    if len(tr.nodes) != 1:
        return None
    node = tr.nodes[0]
    x, normalized, weight, eps = (*node.args, None, None, None, None)[:4]
    if not isinstance(x, Ref) or x.kind != "input" or not isinstance(normalized, tuple) or not normalized:
        return None
    if weight is not None and (not isinstance(weight, Ref) or weight.kind != "param"):
        return None
    if tr.outputs[0].kind != "node" or tr.outputs[0].key[0] != 0:
        return None
    nd = len(x.shape)
    dims = list(range(nd - len(normalized), nd))
    if eps is None:
        eps = torch.finfo(torch.float32).eps  # rms_norm's default: the dtype's machine epsilon
    return dims, float(eps), weight.key if weight is not None else None


def _match_rms(tr: Trace) -> tuple[list[int], float, str | None] | None:
    """Walk the dataflow from the input: square, mean over dims (keepdim), + eps, sqrt / rsqrt, divide /
    multiply x, then an optional multiply by a parameter; every op feeds the next, nothing else runs."""
    nodes = tr.nodes
    if not 5 <= len(nodes) <= 6:
        return None

    def is_x(a: Any) -> bool:
        return isinstance(a, Ref) and a.kind == "input" and a.key == 0

    def arg(node: Node, i: int, name: str, default: Any = None) -> Any:
        return node.args[i] if len(node.args) > i else dict(node.kwargs).get(name, default)

    n = nodes[0]  # x * x or x ** 2
    if not (
        (n.op == "aten.pow.Tensor_Scalar" and is_x(arg(n, 0, "self")) and arg(n, 1, "exponent") == 2)
        or (n.op == "aten.mul.Tensor" and len(n.args) == 2 and is_x(n.args[0]) and is_x(n.args[1]))
    ):
        return None
    n = nodes[1]  # mean over dims, keepdim
    if n.op != "aten.mean.dim" or not _is_node(arg(n, 0, "self"), 0) or arg(n, 3, "dtype") is not None:
        return None
    dims, keepdim = arg(n, 1, "dim"), arg(n, 2, "keepdim", False)
    if not keepdim or not dims:
        return None
    n = nodes[2]  # + eps (add or add_, Tensor or Scalar overload, alpha 1)
    eps = arg(n, 1, "other")
    if not (n.op.startswith(("aten.add.", "aten.add_.")) and _is_node(arg(n, 0, "self"), 1)):
        return None
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0 or arg(n, 2, "alpha", 1) != 1:
        return None
    n, n2 = nodes[3], nodes[4]  # sqrt then x / r, or rsqrt then x * r (either order)
    if len(n.args) != 1 or not _is_node(n.args[0], 2) or len(n2.args) != 2:
        return None
    if n.op == "aten.sqrt.default":
        if n2.op != "aten.div.Tensor" or not (is_x(n2.args[0]) and _is_node(n2.args[1], 3)):
            return None
    elif n.op == "aten.rsqrt.default":
        a, b = n2.args
        if n2.op != "aten.mul.Tensor" or not ((is_x(a) and _is_node(b, 3)) or (is_x(b) and _is_node(a, 3))):
            return None
    else:
        return None
    weight = None
    if len(nodes) == 6:  # * weight, either side
        n = nodes[5]
        if n.op != "aten.mul.Tensor" or len(n.args) != 2:
            return None
        a, b = n.args
        other = b if _is_node(a, 4) else a if _is_node(b, 4) else None
        if not isinstance(other, Ref) or other.kind != "param":
            return None
        weight = other.key
    if not _is_node(tr.outputs[0], len(nodes) - 1):
        return None
    return [int(d) for d in dims], float(eps), weight


def _is_node(a: Any, i: int) -> bool:
    """Is ``a`` the (first) result of node ``i``?"""
    return isinstance(a, Ref) and a.kind == "node" and a.key == (i, 0)
