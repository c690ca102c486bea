"""``Shape``: the facts about one problem that the builtin catalog plans with, as the recognisers
(``recognise.py``, ``recognise_reduce.py``) find them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
