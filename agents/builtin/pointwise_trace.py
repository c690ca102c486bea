"""The trace behind ``pointwise``: a dispatch mode that records a reference's aten ops, run on meta tensors,
as an expression DAG over leaves (forward inputs, parameters and buffers, the heavy op's output) and constants.

Each op the templates can reproduce has a handler (``HANDLERS``, or the op sets ``UNARY``, ``BINARY``, ``VIEWS``,
...) that binds its schema's arguments and appends one node; anything else marks the trace failed with the reason,
which ``pointwise.build_spec`` turns into ``Refuse``. ``BOOL_OPS`` and ``TRANSCENDENTAL`` also tell the
expression templates how to emit a node. A tensor the forward makes of one repeated number (``torch.full``,
``torch.ones_like``, ``torch.tensor(0.0, device=x.device)``, ...) is a constant of the expression.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Node ops whose value is a bool (the C code keeps them as bool and converts where arithmetic needs a float).
BOOL_OPS = frozenset({"gt", "ge", "lt", "le", "eq", "ne", "logical_not", "logical_and", "logical_or"})
# Ops with an exp/log/tanh/division inside: where fast-math intrinsics could change anything at all (gelu counts
# in its tanh form only: erf has no intrinsic).
TRANSCENDENTAL = frozenset(
    {"sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "silu", "mish", "softplus",
     "elu", "celu", "log_sigmoid", "div", "reciprocal"}
)  # fmt: skip
UNARY = frozenset(
    {"relu", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "abs",
     "neg", "reciprocal", "sin", "cos", "erf", "silu", "mish", "hardswish", "hardsigmoid", "sign", "floor", "ceil",
     "trunc", "frac", "logical_not"}
)  # fmt: skip
BINARY = frozenset({"mul", "maximum", "minimum", "fmax", "fmin", "gt", "ge", "lt", "le", "eq", "ne", "logical_and",
                    "logical_or"})  # fmt: skip
# Ops that only re-view or copy memory (``_to_copy`` only to fp32, e.g. a mask's ``.float()``): a view of a leaf is
# the same leaf used with another shape; a view of a computed value whose leaves are all full keeps its flat
# order, so the expression does not change.
VIEWS = frozenset({"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "alias", "detach", "clone",
                   "lift_fresh", "_to_copy"})  # fmt: skip
TRANSPOSES = frozenset({"t", "permute", "transpose"})  # only as a heavy op's operand (W.t() of a linear)
HEAVY = frozenset({"mm", "addmm", "bmm", "convolution"})
DIAGONAL = frozenset({"diag_embed"})  # a 1-D leaf made a diagonal matrix: only as an operand of aten.mm
# Factories of one repeated value (the number, or the argument that holds it): that constant broadcast to the shape.
FILLED: dict[str, float | str] = {
    "scalar_tensor": "s", "full": "fill_value", "new_full": "fill_value", "full_like": "fill_value",
    "ones": 1.0, "new_ones": 1.0, "ones_like": 1.0, "zeros": 0.0, "new_zeros": 0.0, "zeros_like": 0.0,
}  # fmt: skip
# Tensors made from Python data: on meta these run no aten op at all (on the CPU, aten.lift_fresh of the data).
LITERALS = (torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor)
HANDLED = (
    UNARY
    | BINARY
    | VIEWS
    | TRANSPOSES
    | HEAVY
    | DIAGONAL
    | frozenset(FILLED)
    | {"gelu", "elu", "celu", "leaky_relu", "hardtanh", "softplus", "threshold", "hardshrink", "softshrink", "round",
       "log_sigmoid_forward", "add", "sub", "rsub", "div", "pow", "clamp", "clamp_min", "clamp_max", "where",
       "masked_fill", "addcmul", "addcdiv", "lerp"}
)  # fmt: skip


class Refuse(Exception):
    """The reference is outside what the templates reproduce; the message says why (for tests and logs)."""


@dataclass
class _Value:
    """What the trace knows about one tensor the reference touched."""

    node: int | None  # expression node (None for a transposed operand, usable only by the heavy op)
    shape: tuple[int, ...]
    leaves: frozenset[int]  # leaf indices it depends on
    leaf: int | None = None  # set when the value is a leaf itself (or a view of one)
    transposed: bool = False  # t(W) / W.T of a 2-D leaf
    diagonal: bool = False  # diag_embed(a) of a 1-D leaf: the matrix is never built, only multiplied by


@dataclass
class Trace:
    leaves: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[list[Any]] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)  # per node
    node_leaves: list[frozenset[int]] = field(default_factory=list)  # per node: the leaves it reads
    heavy: dict[str, Any] | None = None
    heavy_leaf: int | None = None


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    out: dict[str, Any] = {}
    schema = func._schema.arguments
    positional = [a for a in schema if not a.kwarg_only]
    for a, v in zip(positional, args, strict=False):
        out[a.name] = v
    for a in schema:
        if a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.name not in out:
            out[a.name] = a.default_value
    return out


def _number(v: Any) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float) and math.isfinite(float(v)):
        return float(v)
    raise Refuse(f"scalar argument {v!r} is not a finite real number")


def _repeated(data: Any) -> float:
    """The number a tensor made from Python ``data`` holds everywhere (a number, or nested lists of one)."""
    flat = [data]
    while any(isinstance(v, list | tuple) for v in flat):
        flat = [w for v in flat for w in (v if isinstance(v, list | tuple) else [v])]
    if len({(c, math.copysign(1.0, c)) for c in map(_number, flat)}) != 1:
        raise Refuse(f"a tensor made in forward from {reprlib.repr(data)}: not one repeated number")
    return _number(flat[0])


class _Literals(TorchFunctionMode):
    """Shows the tracer the tensors made from Python data, with that data: no aten op does on meta."""

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in LITERALS and self.tracer.failed is None and not self.tracer.known(out):
            positional = args[1:] if func is torch.Tensor.new_tensor else args
            data = positional[0] if positional else kwargs.get("data", kwargs.get("obj"))
            try:
                self.tracer.literal(data, out)
            except Refuse as exc:
                self.tracer.failed = str(exc)
        return out


class Tracer(TorchDispatchMode):
    """Records the pointwise expression while the reference runs on meta tensors."""

    def __init__(self, inputs: list[torch.Tensor], params: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.t = Trace()
        self.values: dict[int, _Value] = {}
        self.keep: list[Any] = []  # every tensor seen stays alive, so no id is reused during the trace
        self.failed: str | None = None
        self.input_ids = {id(x): k for k, x in enumerate(inputs)}
        self.param_ids = {id(p): name for name, p in params.items()}
        self.keep += [*inputs, *params.values()]
        self.consts: dict[tuple[float, float], int] = {}  # by value and sign, so -0.0 is not 0.0
        self.leaf_nodes: dict[int, int] = {}
        self.literals = _Literals(self)

    # ---- dispatch

    def __enter__(self) -> Tracer:
        self.literals.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.literals.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.failed is None:
            try:
                self.record(func, args, kwargs, out)
            except Refuse as exc:
                self.failed = str(exc)
        return out

    # ---- values

    def leaf(self, kind: str, key: Any, shape: tuple[int, ...], used: tuple[int, ...]) -> _Value:
        """A leaf (input k / parameter name) used with shape ``used``; one leaf per (source, used shape)."""
        same = [
            j
            for j, rec in enumerate(self.t.leaves)
            if rec["kind"] == kind and rec["key"] == key and tuple(rec["shape"]) == used
        ]
        if same:
            return _Value(None, used, frozenset(same[:1]), leaf=same[0])
        j = len(self.t.leaves)
        self.t.leaves.append({"kind": kind, "key": key, "shape": list(used), "source_shape": list(shape)})
        return _Value(None, used, frozenset({j}), leaf=j)

    def value(self, x: torch.Tensor) -> _Value:
        known = self.values.get(id(x))
        if known is not None:
            return known
        if id(x) in self.input_ids:
            v = self.leaf("input", self.input_ids[id(x)], tuple(x.shape), tuple(x.shape))
        elif id(x) in self.param_ids:
            v = self.leaf("param", self.param_ids[id(x)], tuple(x.shape), tuple(x.shape))
        else:
            raise Refuse(f"a tensor of shape {tuple(x.shape)} that is neither an input, a parameter nor computed")
        self.values[id(x)] = v
        return v

    def known(self, x: Any) -> bool:
        """Whether ``x`` is a tensor the trace has a value for (or would have: an input or parameter)."""
        return isinstance(x, torch.Tensor) and any(id(x) in d for d in (self.values, self.input_ids, self.param_ids))

    def literal(self, data: Any, out: torch.Tensor) -> None:
        """``out`` made from Python ``data`` (``torch.tensor(c)`` and kin): a constant if it is one number."""
        self.keep.append(out)
        if out.dtype not in (torch.float32, torch.bool):
            raise Refuse(f"a {out.dtype} tensor made in forward from {reprlib.repr(data)}")
        self.values[id(out)] = _Value(self.const(_repeated(data)), tuple(out.shape), frozenset())

    def node_of(self, v: _Value) -> int:
        """The expression node of a value (a leaf gets its node on first use)."""
        if v.transposed:
            raise Refuse("a transposed tensor used outside a matmul")
        if v.diagonal:
            raise Refuse("a diagonal matrix used other than as a matmul operand")
        if v.node is not None:
            return v.node
        assert v.leaf is not None
        if v.leaf not in self.leaf_nodes:
            self.leaf_nodes[v.leaf] = self.emit("leaf", [], [v.leaf], v.shape)
        return self.leaf_nodes[v.leaf]

    def const(self, value: Any) -> int:
        c = _number(value)
        k = (c, math.copysign(1.0, c))
        if k not in self.consts:
            self.consts[k] = self.emit("const", [], [c], ())
        return self.consts[k]

    def emit(self, op: str, ins: list[int], attrs: list[Any], shape: tuple[int, ...]) -> int:
        self.t.nodes.append([op, ins, attrs])
        self.t.shapes.append(shape)
        leaves = frozenset(attrs[:1]) if op == "leaf" else frozenset().union(*(self.t.node_leaves[i] for i in ins))
        self.t.node_leaves.append(leaves)
        return len(self.t.nodes) - 1

    # ---- one op

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        base = func.overloadpacket.__name__
        inplace = base.endswith("_") and not base.startswith("_") and base[:-1] in HANDLED
        name = base[:-1] if inplace else base
        if name not in HANDLED:
            raise Refuse(f"no elementwise handler for aten.{base}")
        a = _bind(func, args, kwargs)
        first = next(iter(a.values()), None)
        if inplace:
            target = self.value(first) if isinstance(first, torch.Tensor) else None
            if target is None:
                raise Refuse(f"aten.{base} updates a non-tensor in place")
            if target.leaf is not None and self.t.leaves[target.leaf]["kind"] == "param":
                raise Refuse(f"aten.{base} updates a parameter in place")
        if isinstance(out, tuple | list):
            if name != "log_sigmoid_forward":
                raise Refuse(f"aten.{base} returns several tensors")
            out = out[0]
        if not isinstance(out, torch.Tensor):
            raise Refuse(f"aten.{base} returned no tensor")
        self.keep.append(out)
        if out.dtype not in (torch.float32, torch.bool):
            raise Refuse(f"aten.{base} computes in {out.dtype}")
        for v in a.values():
            for x in v if isinstance(v, list | tuple) else [v]:
                if isinstance(x, torch.Tensor) and x.dtype not in (torch.float32, torch.bool):
                    raise Refuse(f"aten.{base} reads a {x.dtype} tensor")
        shape = tuple(out.shape)
        if name in DIAGONAL:
            self.values[id(out)] = self.diagonal(a, shape)
            return
        if name == "mm" and any(isinstance(x, torch.Tensor) and self.value(x).diagonal for x in (first, a["mat2"])):
            self.values[id(out)] = self.scaled(self.value(first), self.value(a["mat2"]), shape)
            return
        if name in HEAVY:
            self.values[id(out)] = self.heavy(name, a, shape)
            return
        if name in VIEWS or name in TRANSPOSES:
            self.values[id(out)] = self.view(name, a, shape, out)
            return
        node = HANDLERS[name](self, a, shape) if name in HANDLERS else self.simple(name, a, shape)
        self.values[id(out)] = _Value(node, shape, self.t.node_leaves[node])

    def operand(self, x: Any) -> int:
        if isinstance(x, torch.Tensor):
            return self.node_of(self.value(x))
        return self.const(x)

    def simple(self, name: str, a: dict[str, Any], shape: tuple[int, ...]) -> int:
        vals = list(a.values())
        if name in UNARY:
            return self.emit(name, [self.operand(vals[0])], [], shape)
        if name in BINARY:
            return self.emit(name, [self.operand(vals[0]), self.operand(vals[1])], [], shape)
        raise Refuse(f"no elementwise handler for aten.{name}")

    def view(self, name: str, a: dict[str, Any], shape: tuple[int, ...], out: torch.Tensor) -> _Value:
        src = a.get("self")
        if not isinstance(src, torch.Tensor):
            raise Refuse(f"aten.{name} of a non-tensor")
        if name == "_to_copy" and a.get("dtype") not in (None, torch.float32):
            raise Refuse("a dtype conversion")
        if name == "lift_fresh":  # torch.tensor(data) on the CPU: the data is in the tensor lifted
            if src.device.type != "cpu":
                raise Refuse("a tensor constant created in forward")
            return _Value(self.const(_repeated(src.tolist())), shape, frozenset())
        v = self.value(src)
        if v.node is not None and not v.leaves:  # computed from constants alone: one number, in any view or place
            return _Value(v.node, shape, v.leaves)
        if name == "_to_copy" and out.device != src.device:
            raise Refuse("a device conversion")
        if v.diagonal:
            raise Refuse(f"aten.{name} of a diagonal matrix")
        if name in TRANSPOSES:
            if v.leaf is None or len(v.shape) != 2 or (name == "permute" and list(a["dims"]) != [1, 0]):
                raise Refuse(f"aten.{name} of a computed or non-2-D tensor")
            return _Value(None, shape, v.leaves, leaf=v.leaf, transposed=not v.transposed)
        if v.transposed:
            raise Refuse(f"aten.{name} of a transposed operand")
        if v.leaf is not None and v.node is None:
            rec = self.t.leaves[v.leaf]
            if name == "expand":  # broadcasting made explicit: the leaf's own shape broadcasts the same way
                return v
            if rec["kind"] == "heavy":  # the heavy op's output is full: a view keeps its flat order
                return _Value(None, shape, v.leaves, leaf=v.leaf)
            return self.leaf(rec["kind"], rec["key"], tuple(rec["source_shape"]), shape)
        if math.prod(shape) != math.prod(v.shape):
            raise Refuse(f"aten.{name} changes the number of elements of a computed value")
        if v.node is not None and name != "expand" and self.band_dependent(v.leaves):
            raise Refuse(f"aten.{name} re-views a value computed from a broadcast operand")
        return _Value(v.node, shape, v.leaves, leaf=v.leaf)

    def band_dependent(self, leaves: frozenset[int]) -> bool:
        return any(self.t.leaves[j]["kind"] == "param" for j in leaves)

    # ---- a diagonal matrix times a matrix

    def diagonal(self, a: dict[str, Any], shape: tuple[int, ...]) -> _Value:
        src = a["self"]
        v = self.value(src) if isinstance(src, torch.Tensor) else None
        if v is None or v.leaf is None or v.node is not None or len(v.shape) != 1:
            raise Refuse("aten.diag_embed of something other than a 1-D input or parameter")
        if a["offset"] != 0 or sorted(d % 2 for d in (a["dim1"], a["dim2"])) != [0, 1]:
            raise Refuse("aten.diag_embed off the main diagonal")
        return _Value(None, shape, v.leaves, leaf=v.leaf, diagonal=True)

    def scaled(self, left: _Value, right: _Value, shape: tuple[int, ...]) -> _Value:
        """diag(a) @ B = a[:, None] * B (rows scaled) and B @ diag(a) = B * a (columns scaled)."""
        if left.diagonal == right.diagonal:
            raise Refuse("a product of two diagonal matrices")
        diag, other = (left, right) if left.diagonal else (right, left)
        rec = self.t.leaves[diag.leaf]  # type: ignore[index]
        n = rec["source_shape"][0]
        used = (n, 1) if left.diagonal else (n,)  # against the (N, M) / (M, N) output
        scale = self.node_of(self.leaf(rec["kind"], rec["key"], tuple(rec["source_shape"]), used))
        ins = [scale, self.node_of(other)] if left.diagonal else [self.node_of(other), scale]  # as written
        node = self.emit("mul", ins, [], shape)
        return _Value(node, shape, self.t.node_leaves[node])

    # ---- the heavy op

    def heavy(self, name: str, a: dict[str, Any], shape: tuple[int, ...]) -> _Value:
        if self.t.heavy is not None:
            raise Refuse("more than one matmul / convolution")
        spec = self.conv(a) if name == "convolution" else self.matmul(name, a)
        self.t.heavy = spec
        j = len(self.t.leaves)
        self.t.leaves.append({"kind": "heavy", "key": spec["op"], "shape": list(shape), "source_shape": list(shape)})
        self.t.heavy_leaf = j
        return _Value(None, shape, frozenset({j}), leaf=j)

    def operand_leaf(self, x: Any, kinds: tuple[str, ...]) -> tuple[_Value, dict[str, Any]]:
        if not isinstance(x, torch.Tensor):
            raise Refuse("a heavy op operand that is not a tensor")
        v = self.value(x)
        if v.leaf is None or v.node is not None:
            raise Refuse("a heavy op operand computed in the reference (a prologue)")
        rec = self.t.leaves[v.leaf]
        if rec["kind"] not in kinds:
            raise Refuse(f"a heavy op operand that is a {rec['kind']}")
        return v, rec

    def conv(self, a: dict[str, Any]) -> dict[str, Any]:
        x, xr = self.operand_leaf(a["input"], ("input",))
        w, wr = self.operand_leaf(a["weight"], ("param",))
        if x.transposed or w.transposed or xr["shape"] != xr["source_shape"] or wr["shape"] != wr["source_shape"]:
            raise Refuse("a convolution of re-viewed operands")
        bias = None
        if a["bias"] is not None:
            _, br = self.operand_leaf(a["bias"], ("param",))
            if br["shape"] != br["source_shape"] or len(br["shape"]) != 1:
                raise Refuse("a convolution bias that is not a 1-D parameter")
            bias = br["key"]
        dims = len(a["stride"])
        if dims not in (1, 2, 3):
            raise Refuse(f"a {dims}-D convolution")
        return {
            "op": "conv",
            "dims": dims,
            "x": xr["key"],
            "weight": wr["key"],
            "bias": bias,
            "stride": [int(s) for s in a["stride"]],
            "padding": [int(s) for s in a["padding"]],
            "dilation": [int(s) for s in a["dilation"]],
            "transposed": bool(a["transposed"]),
            "output_padding": [int(s) for s in a["output_padding"]],
            "groups": int(a["groups"]),
        }

    def matmul(self, name: str, a: dict[str, Any]) -> dict[str, Any]:
        if name == "addmm" and (_number(a["beta"]) != 1.0 or _number(a["alpha"]) != 1.0):
            raise Refuse("addmm with beta or alpha other than 1")
        first, second = (a["mat1"], a["mat2"]) if name == "addmm" else (a["self"], a["mat2"])
        x, xr = self.operand_leaf(first, ("input",))
        if x.transposed:
            raise Refuse("a transposed left operand")
        source = xr["source_shape"]
        if xr["shape"] != source and not (
            name != "bmm" and len(xr["shape"]) == 2 and source and xr["shape"][-1] == source[-1]
        ):
            raise Refuse("a left operand re-viewed other than by flattening its leading dims")
        w, wr = self.operand_leaf(second, ("input", "param"))
        if wr["shape"] != wr["source_shape"] and not w.transposed:
            raise Refuse("a re-viewed right operand")
        bias = None
        if name == "addmm":
            _, br = self.operand_leaf(a["self"], ("param",))
            if (
                len(br["shape"]) != 1
                or br["shape"] != br["source_shape"]
                or not (w.transposed and wr["kind"] == "param")
            ):
                raise Refuse("an addmm that is not a linear layer (bias, x, weight.t())")
            bias = br["key"]
        if w.transposed and wr["kind"] == "param":
            return {"op": "linear", "x": xr["key"], "weight": wr["key"], "bias": bias}
        return {
            "op": "matmul",
            "a": ["input", xr["key"]],
            "b": [wr["kind"], wr["key"]],
            "b_transposed": w.transposed,
        }


# ------------------------------------------------------------------------------------------ handlers


def _alpha(t: Tracer, node: int, alpha: Any, shape: tuple[int, ...]) -> int:
    c = _number(alpha)
    return node if c == 1.0 else t.emit("mul", [node, t.const(c)], [], shape)


def _add(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return t.emit("add", [t.operand(a["self"]), _alpha(t, t.operand(a["other"]), a["alpha"], shape)], [], shape)


def _sub(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return t.emit("sub", [t.operand(a["self"]), _alpha(t, t.operand(a["other"]), a["alpha"], shape)], [], shape)


def _rsub(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return t.emit("sub", [t.operand(a["other"]), _alpha(t, t.operand(a["self"]), a["alpha"], shape)], [], shape)


def _div(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    q = t.emit("div", [t.operand(a["self"]), t.operand(a["other"])], [], shape)
    mode = a.get("rounding_mode")
    if mode is None:
        return q
    if mode in ("trunc", "floor"):
        return t.emit(mode, [q], [], shape)
    raise Refuse(f"division with rounding_mode={mode!r}")


def _pow(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return t.emit("pow", [t.operand(a["self"]), t.operand(a["exponent"])], [], shape)


def _clamp(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    # torch.clamp(x, lo, hi) is min(max(x, lo), hi), NaN in x propagating: two nodes say exactly that.
    node = t.operand(a["self"])
    lo, hi = a.get("min"), a.get("max")
    if lo is not None:
        node = t.emit("clamp_min", [node, t.operand(lo)], [], shape)
    if hi is not None:
        node = t.emit("clamp_max", [node, t.operand(hi)], [], shape)
    return node


def _hardtanh(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return _clamp(t, {"self": a["self"], "min": a["min_val"], "max": a["max_val"]}, shape)


def _clamp_one(which: str) -> Callable[[Tracer, dict[str, Any], tuple[int, ...]], int]:
    def handler(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
        bound = a["min"] if which == "clamp_min" else a["max"]
        return t.emit(which, [t.operand(a["self"]), t.operand(bound)], [], shape)

    return handler


def _where(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    cond = a["condition"]
    if not (isinstance(cond, torch.Tensor) and cond.dtype == torch.bool):
        raise Refuse("where() with a condition that is not a bool tensor")
    return t.emit("where", [t.operand(cond), t.operand(a["self"]), t.operand(a["other"])], [], shape)


def _masked_fill(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    return t.emit("where", [t.operand(a["mask"]), t.operand(a["value"]), t.operand(a["self"])], [], shape)


def _addc(op: str) -> Callable[[Tracer, dict[str, Any], tuple[int, ...]], int]:
    def handler(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
        inner = t.emit(op, [t.operand(a["tensor1"]), t.operand(a["tensor2"])], [], shape)
        return t.emit("add", [t.operand(a["self"]), _alpha(t, inner, a["value"], shape)], [], shape)

    return handler


def _lerp(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    start, end = t.operand(a["self"]), t.operand(a["end"])
    diff = t.emit("sub", [end, start], [], shape)
    return t.emit("add", [start, t.emit("mul", [t.operand(a["weight"]), diff], [], shape)], [], shape)


def _with(op: str, *names: str) -> Callable[[Tracer, dict[str, Any], tuple[int, ...]], int]:
    """A unary op with scalar attributes, in schema order."""

    def handler(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
        return t.emit(op, [t.operand(a["self"])], [_number(a[n]) for n in names], shape)

    return handler


def _gelu(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    if a["approximate"] not in ("none", "tanh"):
        raise Refuse(f"gelu approximate={a['approximate']!r}")
    return t.emit("gelu", [t.operand(a["self"])], [a["approximate"]], shape)


def _round(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
    if a.get("decimals", 0) not in (0, None):
        raise Refuse("round with decimals")
    return t.emit("round", [t.operand(a["self"])], [], shape)


def _filled(value: float | str) -> Callable[[Tracer, dict[str, Any], tuple[int, ...]], int]:
    """A factory of one repeated value: ``value``, or the argument it names."""

    def handler(t: Tracer, a: dict[str, Any], shape: tuple[int, ...]) -> int:
        return t.const(a[value] if isinstance(value, str) else value)

    return handler


HANDLERS: dict[str, Callable[[Tracer, dict[str, Any], tuple[int, ...]], int]] = {
    "add": _add,
    "sub": _sub,
    "rsub": _rsub,
    "div": _div,
    "pow": _pow,
    "clamp": _clamp,
    "hardtanh": _hardtanh,
    "clamp_min": _clamp_one("clamp_min"),
    "clamp_max": _clamp_one("clamp_max"),
    "where": _where,
    "masked_fill": _masked_fill,
    "addcmul": _addc("mul"),
    "addcdiv": _addc("div"),
    "lerp": _lerp,
    "gelu": _gelu,
    "round": _round,
    "elu": _with("elu", "alpha", "scale", "input_scale"),
    "celu": _with("celu", "alpha"),
    "leaky_relu": _with("leaky_relu", "negative_slope"),
    "softplus": _with("softplus", "beta", "threshold"),
    "threshold": _with("threshold", "threshold", "value"),
    "hardshrink": _with("hardshrink", "lambd"),
    "softshrink": _with("softshrink", "lambd"),
    "log_sigmoid_forward": lambda t, a, shape: t.emit("log_sigmoid", [t.operand(a["self"])], [], shape),
    **{name: _filled(value) for name, value in FILLED.items()},
}
