"""Recognise a reference that is a chain of pointwise ops, alone or after one matmul / linear / convolution.

The reference runs once on meta tensors under a dispatch mode that records every aten op with its
arguments (bound to the op's schema, so defaults are explicit: ``pointwise_trace``). From that trace an
expression DAG is built over *leaves* (the forward's tensor inputs, the model's parameters and persistent
buffers, and the heavy op's output) and constants; it is serialised as a JSON spec (``Shape.spec``) that the
templates in ``templates_elementwise_cuda`` / ``_cpu`` compile into one fused kernel.

Families:

- ``elementwise``: pointwise ops only; the output has the shape of a forward input.
  A matmul by a diagonal matrix built in the forward (``torch.diag(a) @ B``, ``B @ torch.diag(a)``) is the
  pointwise product it equals, ``a[:, None] * B`` / ``B * a``: N^2 work instead of the matmul's N^3, and exactly
  the reference's values (each output is one product plus zeros), finite inputs assumed.
- ``epilogue``: exactly one heavy op (``aten.mm``/``addmm``/``bmm`` reached from ``F.linear``/``torch.matmul``,
  or ``aten.convolution``) whose operands are inputs and parameters, followed by at least one pointwise op.
  The candidate keeps the heavy op in the library and fuses the tail (see ``tools.cheat_tricks.library_family``
  for the anti-cheat side of that bargain).

Leaves other than "full" ones (an input of the output's shape, or the heavy op's output) are *bands*: a
tensor broadcast to the output whose non-1 dims form one contiguous span, so that the element for flat output
index ``i`` is ``(i // inner) % size`` of it (a bias over the last dim, a per-channel scale ``(C, 1, 1)``, a
scalar tensor). Anything outside this -- an op without a handler, a view of a computed band, a transpose in
the chain, integer dtypes, random ops, an in-place update of a parameter -- refuses the problem (None): the
builtin team then honestly has no idea for it rather than a wrong one.
"""

from __future__ import annotations

import ast
import functools
import json
import math
from pathlib import Path
from typing import Any

import torch

from agents.builtin.pointwise_trace import HANDLED, Refuse, Trace, Tracer
from tools.problem import ProblemInfo, TensorSpec

SPEC_VERSION = 1


# ------------------------------------------------------------------------------------- the spec


def _literal(value: Any) -> Any:
    """A JSON-able copy of constructor arguments (tuples become lists), or Refuse."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refuse("a non-finite constructor argument")
        return value
    if isinstance(value, list | tuple):
        return [_literal(v) for v in value]
    raise Refuse(f"a constructor argument of type {type(value).__name__}")


def _broadcasts_to(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    if len(shape) > len(out) and any(d != 1 for d in shape[: len(shape) - len(out)]):
        return False
    tail = shape[-len(out) :] if out else ()
    pad = (1,) * (len(out) - len(tail)) + tuple(tail)
    return all(p in (1, o) for p, o in zip(pad, out, strict=True))


def band(shape: tuple[int, ...] | list[int], out: tuple[int, ...] | list[int]) -> tuple[int, int]:
    """(size, inner) such that ``shape`` broadcast to ``out`` holds, at flat index i of ``out``, its element
    ``(i // inner) % size``; ValueError when its non-1 dims are not one contiguous span of ``out``'s."""
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


def inserted_ones(source: tuple[int, ...], used: tuple[int, ...]) -> list[int] | None:
    """The positions in ``used`` of unit dims inserted into ``source`` (``unsqueeze`` at each, in order), or
    None when ``used`` is not ``source`` with unit dims inserted."""
    out, i = [], 0
    for p, d in enumerate(used):
        if i < len(source) and source[i] == d:
            i += 1
        elif d == 1:
            out.append(p)
        else:
            return None
    return out if i == len(source) else None


def _reachable(nodes: list[list[Any]], out: int) -> set[int]:
    seen: set[int] = set()
    stack = [out]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(nodes[n][1])
    return seen


def build_spec(module: Any, info: ProblemInfo) -> dict[str, Any]:
    """Trace the problem's forward on meta tensors into a spec; raises Refuse with the reason."""
    from tools.problem import build_model

    init = list(module.get_init_inputs())
    init_literal = _literal(init)
    with torch.device("meta"):
        inputs = list(module.get_inputs())
    numbers = [k for k, x in enumerate(inputs) if isinstance(x, int | float) and not isinstance(x, bool)]
    if not all(isinstance(x, torch.Tensor) or k in numbers for k, x in enumerate(inputs)):
        raise Refuse("a forward argument that is neither a tensor nor a number")
    # A number argument is traced as a 0-dim tensor: an operand read at call time like a broadcast input, never a
    # constant of the trace (forward code that branches on it, or hands it to math, fails here and is refused).
    inputs = [torch.empty((), device="meta") if k in numbers else x for k, x in enumerate(inputs)]
    model = build_model(module.Model, init, "meta", seed=0)
    state = model.state_dict(keep_vars=True)
    tracer = Tracer(inputs, dict(state))
    with torch.no_grad(), tracer:
        out = model(*inputs)
    if tracer.failed:
        raise Refuse(tracer.failed)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise Refuse("the output is not one fp32 tensor")
    t = tracer.t
    v = tracer.values.get(id(out))
    if v is None:
        raise Refuse("the output is an input or a parameter: nothing to compute")
    if v.node is None:
        raise Refuse("the output is a heavy op's result with no tail" if t.heavy else "nothing to compute")
    out_shape = tuple(out.shape)
    n = math.prod(out_shape)
    live = _reachable(t.nodes, v.node)
    used_leaves = sorted({t.nodes[i][2][0] for i in live if t.nodes[i][0] == "leaf"})
    if t.heavy is not None:
        if t.heavy_leaf not in used_leaves:
            raise Refuse("the output does not depend on the heavy op")
        if not any(t.nodes[i][0] not in ("leaf", "const") for i in live):
            raise Refuse("no pointwise tail after the heavy op")
        if list(out_shape) != t.leaves[t.heavy_leaf]["shape"] and not _natural(t, out_shape, inputs):
            raise Refuse("the output is a re-view of the heavy op's result")
    leaves = []
    for j in used_leaves:
        rec = t.leaves[j]
        shape = tuple(rec["shape"])
        extra: dict[str, Any] = {}
        if rec["kind"] == "heavy":
            full = True
        elif rec["kind"] == "input":
            full = tuple(rec["source_shape"]) == out_shape
            if not full and shape != tuple(rec["source_shape"]):
                # Only unit dims inserted (a[:, None]): the candidate does the same to whatever it is given.
                ones = inserted_ones(tuple(rec["source_shape"]), shape)
                if ones is None:
                    raise Refuse("a broadcast input used through a view")
                extra = {"unsqueeze": ones}
        else:
            full = False
        if not full:
            try:
                band(shape, out_shape)
            except ValueError as exc:
                raise Refuse(f"operand {rec['key']}: {exc}") from exc
        leaves.append({"kind": rec["kind"], "key": rec["key"], "shape": list(shape), "full": full, **extra})
    if not any(leaf["full"] for leaf in leaves):
        raise Refuse("no operand of the output's shape")
    if t.heavy is None:
        first_full = next(leaf for leaf in leaves if leaf["full"])
        if first_full["kind"] != "input":
            raise Refuse("no input of the output's shape")
    # Every computed node that reads a broadcast operand must itself broadcast to the output, so the
    # operands' bands (computed against the output's shape) index the same elements the reference used.
    band_leaves = {j for j, leaf in zip(used_leaves, leaves, strict=True) if not leaf["full"]}
    for i in live:
        op, ins, attrs = t.nodes[i]
        shape = t.shapes[i]
        if op in ("leaf", "const") or not t.node_leaves[i]:  # of constants alone: one number, whatever its shape
            continue
        if t.node_leaves[i] & band_leaves:
            if not _broadcasts_to(shape, out_shape):
                raise Refuse(f"aten.{op} result {shape} does not broadcast to the output {out_shape}")
        elif math.prod(shape) not in (n, 1):
            raise Refuse(f"aten.{op} result {shape} is not the output's size")
    # Renumber: live nodes in order, leaves by their position in `leaves`.
    order = sorted(live)
    index = {old: new for new, old in enumerate(order)}
    leaf_index = {j: k for k, j in enumerate(used_leaves)}
    nodes = []
    for old in order:
        op, ins, attrs = t.nodes[old]
        if op == "leaf":
            attrs = [leaf_index[attrs[0]]]
        nodes.append([op, [index[i] for i in ins], attrs])
    params = sorted(
        {leaf["key"] for leaf in leaves if leaf["kind"] == "param"}
        | ({t.heavy.get("weight"), t.heavy.get("bias")} - {None} if t.heavy else set())
        | ({t.heavy["b"][1]} if t.heavy and t.heavy.get("b", [None])[0] == "param" else set())
    )
    return {
        "version": SPEC_VERSION,
        "init": init_literal,
        "inputs": [list(x.shape) for x in inputs],
        **({"numbers": numbers} if numbers else {}),  # forward arguments that are Python numbers
        "leaves": leaves,
        "nodes": nodes,
        "out": index[v.node],
        "out_shape": list(out_shape),
        "heavy": t.heavy,
        "params": {name: list(state[name].shape) for name in params},
        "flops": int(info.flops),
    }


def _natural(t: Trace, out_shape: tuple[int, ...], inputs: list[torch.Tensor]) -> bool:
    """Whether ``out_shape`` is what the heavy op's Python call returns (F.linear / torch.matmul of an
    N-D input flatten its leading dims internally and restore them)."""
    h = t.heavy or {}
    if h.get("op") == "linear" or (h.get("op") == "matmul" and h["a"][0] == "input"):
        x = inputs[h["x"] if h.get("op") == "linear" else h["a"][1]]
        n = t.leaves[t.heavy_leaf]["shape"][-1] if t.heavy_leaf is not None else None
        return list(out_shape) == [*x.shape[:-1], n]
    return False


# ------------------------------------------------------------------------------------ entry points


def unhandled(aten_ops: dict[str, int]) -> list[str]:
    """The ops of ``ProblemInfo.aten_ops`` without a handler: a cheap test before any trace."""
    out = []
    for op in aten_ops:
        parts = op.split(".")
        base = parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]
        name = base[:-1] if base.endswith("_") and not base.startswith("_") and base[:-1] in HANDLED else base
        if name not in HANDLED:
            out.append(op)
    return sorted(out)


@functools.lru_cache(maxsize=64)
def _spec_of(path: str, sha256: str, info_json: str) -> tuple[str | None, str]:
    """(spec JSON, "") or (None, why): cached by file hash, so an edited file is traced again."""
    from tools.problem import exec_source

    info = ProblemInfo.model_validate_json(info_json)
    try:
        source = Path(path).read_text(encoding="utf-8")
        module = exec_source(source, path, "pointwise")
        spec = build_spec(module, info)
    except Refuse as exc:
        return None, str(exc)
    except Exception as exc:  # a problem that does not run on meta is simply not recognised: the reference stands
        return None, f"the trace failed: {type(exc).__name__}: {exc}"
    return json.dumps(spec, sort_keys=True, separators=(",", ":")), ""


def explain(info: ProblemInfo) -> str:
    """Why ``info`` is not (or is) an elementwise / epilogue problem, in one line (tests and logs)."""
    if not info.aten_ops:
        return "the reference runs no aten op: nothing to compute"
    if missing := unhandled(info.aten_ops):
        return "no elementwise handler for " + ", ".join(missing)
    _, why = _spec_of(info.path, info.sha256, info.model_dump_json())
    return why or "recognised"


def analyse_pointwise(info: ProblemInfo) -> tuple[str, str, dict[str, int]] | None:
    """(family, spec JSON, shape facts) for an elementwise or epilogue problem, else None."""
    if not info.aten_ops or unhandled(info.aten_ops):
        return None
    if len(info.outputs) != 1 or info.outputs[0].dtype != "float32":
        return None
    if not all(
        (isinstance(s, TensorSpec) and s.dtype == "float32") or (isinstance(s, int | float) and not isinstance(s, bool))
        for s in info.inputs
    ):
        return None
    try:
        ast.literal_eval(info.init_inputs)
    except (ValueError, SyntaxError):
        return None
    spec_json, _ = _spec_of(info.path, info.sha256, info.model_dump_json())
    if spec_json is None:
        return None
    spec = json.loads(spec_json)
    numel = math.prod(spec["out_shape"])
    facts = {"rows": numel, "cols": 1}
    heavy = spec["heavy"]
    if heavy is None:
        return "elementwise", spec_json, facts
    if heavy["op"] == "linear":
        weight = spec["params"][heavy["weight"]]
        facts |= {"m": numel // weight[0], "k": weight[1], "n": weight[0]}
    return "epilogue", spec_json, facts


@functools.lru_cache(maxsize=256)
def load(spec_json: str) -> dict[str, Any]:
    """The spec as a dict (cached: templates parse the same string for every point)."""
    return json.loads(spec_json)
