"""The epilogue family's spec transform: the heavy op's bias moved into the pointwise tail.

An epilogue candidate runs the heavy op through torch (cuBLAS / cuDNN on the GPU, the CPU BLAS / oneDNN on
the CPU) and the whole pointwise tail as one kernel, in place on the heavy op's output or into a new buffer;
the reference's bias can stay in the library call or move into the tail. The harness allows that library
call only for such problems and only when the candidate runs no pointwise op in torch
(``tools.cheat_tricks.library_family``), and says so in the result.
"""

from __future__ import annotations

import json
from typing import Any


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
