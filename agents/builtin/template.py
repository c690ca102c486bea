"""A template's parameter space: ``Param`` (one searched parameter), ``Template`` (one kernel strategy for one family
on one device, with its parameters, validity and renderer) and ``key`` (a point's identity). The catalogs
(``catalog.py``, ``catalog_reduce.py``, ``catalog_elementwise.py``) build on these and on nothing of each other.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.builtin.shape import Shape

Params = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """One searched parameter. Numeric values are kept sorted (neighbours are adjacent values); any other
    value set is categorical (every other value is a neighbour). ``default`` is the round-1 value."""

    name: str
    values: tuple[Any, ...]
    default: Any
    structural: bool = False

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in self.values)


@dataclass(frozen=True)
class Template:
    name: str
    family: str
    device: str
    params: tuple[Param, ...]
    renderer: Callable[[Params, str], str]
    describe: Callable[[Params], str]
    valid: Callable[[Params], bool] = lambda p: True
    # Parameters that do not matter for a point get their default, so equivalent points compare equal.
    irrelevant: Callable[[Params], tuple[str, ...]] = lambda p: ()
    extras: tuple[str, ...] = field(default=())  # problem facts carried in params (not searched), e.g. eps
    # Whether a point can run this shape at all (a row that fits on chip, tiles that divide the matrix):
    # the planner never proposes a point that would only fail at run time.
    runs_on: Callable[[Params, Shape], bool] = lambda p, s: True
    # Which shapes of the family the template computes, beyond taking their facts (see ``fits``).
    applies: Callable[[Shape], bool] = lambda s: True
    # The tolerance policies under which the static checks let this template's source run (TF32 is relaxed-only).
    policies: tuple[str, ...] = ("relaxed", "strict")

    def fits(self, shape: Shape) -> bool:
        """Whether this template computes ``shape``'s problem: it takes every fact the shape carries (a template
        without the ``op`` extra computes only the plain op, one without ``eps`` only the default eps), and its
        own condition holds (e.g. a strided or a contiguous reduced dim)."""
        return all(name in self.extras for name in shape.extras()) and self.applies(shape)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def defaults(self) -> Params:
        return {p.name: p.default for p in self.params}

    def normalise(self, params: Params) -> Params:
        """Defaults filled in, values checked, irrelevant parameters reset; raises ValueError if invalid."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known - set(self.extras))
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {unknown}")
        out = {**self.defaults(), **params}
        for p in self.params:
            if out[p.name] not in p.values:
                raise ValueError(f"{self.name}: {p.name}={out[p.name]!r} is not one of {list(p.values)}")
        for name in self.irrelevant(out):
            out[name] = self.param(name).default
        if not self.valid(out):
            raise ValueError(f"{self.name}: invalid combination {out}")
        return out

    def points(self) -> Iterator[Params]:
        """Every distinct valid point of the space, in a fixed order."""
        seen: set[str] = set()
        for values in itertools.product(*(p.values for p in self.params)):
            raw = dict(zip((p.name for p in self.params), values, strict=True))
            try:
                point = self.normalise(raw)
            except ValueError:
                continue
            k = key(self.name, point)
            if k not in seen:
                seen.add(k)
                yield point


def key(template: str, params: Params) -> str:
    return template + json.dumps(params, sort_keys=True, default=str)
