"""The builtin planner's policy: which (template, params) points to try next, with the reason in words.

Round 1 (no parent): the catalog's shape-aware spread of seeds. Later rounds: neighbours of the parent
(the best verified candidate) one parameter at a time. While the parent is far from its roofline
(< 30 %, or unknown) structural moves (algorithm, threading, binding, register caching, another template)
come first; once it is close, tuning moves (block size, vector width, unroll, tiles) do. A numeric parameter
keeps moving the way that already helped (the point behind the parent was slower), values that rarely win
on this shape (a ctypes binding, a single thread on a large input) come after every tuning move, and templates
that keep failing drop to the end. When the neighbourhood is used up the remaining seeds follow, then every
other point of the family's space in a fixed order, so the search is deterministic and ends ([]) only when
the space is exhausted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.builtin.catalog import TEMPLATES, templates_for
from agents.builtin.recognise import analyse
from agents.builtin.seeds import seeds
from agents.builtin.shape import Shape
from agents.builtin.template import Params, Template, key
from agents.builtin.words import FAR_FROM_ROOFLINE, Change, expected_gain
from tools.problem import ProblemInfo

FAILED = {"compile_error", "runtime_error", "incorrect", "rejected", "timeout", "crashed"}


@dataclass(frozen=True)
class IdeaSpec:
    text: str  # plain-language idea
    expected_gain: str  # why it should help, with numbers where possible
    template: str
    params: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable


@dataclass
class _Move:
    template: str
    params: Params
    score: float
    change: Change | None = None  # what differs from the parent (None in round 1 and for fill-ups)


def propose(
    info: ProblemInfo,
    device: str,
    k: int,
    tried: list[dict[str, Any]],
    parent: dict[str, Any] | None,
    policy: str = "relaxed",
) -> list[IdeaSpec]:
    """Up to ``k`` new ideas for this round, never one whose (template, params) is in ``tried`` nor one whose
    source the tolerance ``policy`` would block."""
    shape = analyse(info)
    if shape is None or k <= 0:
        return []
    # Only the templates that compute this variant of the family (log-softmax, RMSNorm, a strided reduction...).
    family_templates = [t for t in templates_for(shape.family, device) if t.fits(shape) and policy in t.policies]
    if not family_templates:
        return []
    history = _History(tried)
    extras = shape.extras()
    parent_record = history.parent_record(parent)

    out: list[IdeaSpec] = []
    taken: set[str] = set()
    allowed = {t.name for t in family_templates}
    for move in _moves(shape, device, family_templates, history, parent):
        if move.template not in allowed:
            continue
        t = TEMPLATES[move.template]
        try:
            params = t.normalise({**move.params, **{n: v for n, v in extras.items() if n in t.extras}})
        except ValueError:
            continue
        if not t.runs_on(params, shape):
            continue
        k_ = key(move.template, params)
        if k_ in history.keys or k_ in taken:
            continue
        taken.add(k_)
        out.append(_idea(t, params, shape, move.change, parent_record))
        if len(out) == k:
            break
    return out


# ----------------------------------------------------------------------------------------- history


class _History:
    """What was tried: keys for exclusion, and outcomes per key for steering."""

    def __init__(self, tried: list[dict[str, Any]]) -> None:
        self.keys: set[str] = set()
        self.records: dict[str, dict[str, Any]] = {}
        self.failures: dict[str, int] = {}
        self.successes: dict[str, int] = {}
        for rec in tried:
            template, params = rec.get("template"), rec.get("params")
            if not isinstance(template, str) or not isinstance(params, dict):
                continue  # an LLM candidate: nothing to exclude
            k = _normalised_key(template, params)
            self.keys.add(k)
            best = self.records.get(k)
            if best is None or (_speed(rec) or 0.0) > (_speed(best) or 0.0):
                self.records[k] = rec
            if rec.get("status") in FAILED:
                self.failures[template] = self.failures.get(template, 0) + 1
            elif rec.get("status") == "ok":
                self.successes[template] = self.successes.get(template, 0) + 1

    def parent_record(self, parent: dict[str, Any] | None) -> dict[str, Any] | None:
        if not parent or not isinstance(parent.get("template"), str) or not isinstance(parent.get("params"), dict):
            return None
        rec = self.records.get(_normalised_key(parent["template"], parent["params"]))
        return {**rec, **{k: v for k, v in parent.items() if v is not None}} if rec else parent

    def speed_of(self, template: str, params: Params) -> float | None:
        rec = self.records.get(key(template, params))
        return _speed(rec) if rec else None

    def failing(self, template: str) -> bool:
        return self.failures.get(template, 0) >= 2 and not self.successes.get(template)


def _speed(rec: dict[str, Any]) -> float | None:
    if rec.get("status") != "ok":
        return None
    s = rec.get("speedup_vs_best")
    return float(s) if isinstance(s, int | float) and math.isfinite(s) else None


def _normalised_key(template: str, params: dict[str, Any]) -> str:
    t = TEMPLATES.get(template)
    if t is not None:
        try:
            return key(template, t.normalise(dict(params)))
        except ValueError:
            pass
    return key(template, params)


# ------------------------------------------------------------------------------------------- moves


def _moves(
    shape: Shape, device: str, family: list[Template], history: _History, parent: dict[str, Any] | None
) -> Iterator[_Move]:
    """Every candidate move in the order to try them; the caller skips tried and invalid ones."""
    seed_list = seeds(shape, device)
    base = _parent_point(parent)
    if base is None:
        # Round 1, or a parent that is not a builtin point (e.g. an LLM candidate): the spread.
        for i, (name, params) in enumerate(seed_list):
            yield _Move(name, params, i)
    else:
        template, params = base
        rec = history.parent_record(parent) or {}
        pct = rec.get("pct_roofline")
        far = not isinstance(pct, int | float) or pct < FAR_FROM_ROOFLINE
        neighbours = list(_neighbours(template, params, shape, family, history, far))
        neighbours.sort(key=lambda m: m.score)  # stable: ties keep the parameter order
        yield from neighbours
        for name, p in seed_list:
            yield _Move(name, p, 100)
    # Then the whole space, failing templates last.
    for t in sorted(family, key=lambda t: history.failing(t.name)):
        for point in t.points():
            yield _Move(t.name, point, 1000)


def _parent_point(parent: dict[str, Any] | None) -> tuple[str, Params] | None:
    if not parent:
        return None
    template, params = parent.get("template"), parent.get("params")
    t = TEMPLATES.get(template) if isinstance(template, str) else None
    if t is None or not isinstance(params, dict):
        return None
    try:
        return template, t.normalise(dict(params))
    except ValueError:
        return None


def _preference(t: Template, name: str, shape: Shape) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A categorical parameter's values, most promising first, for this shape, and its fallback values:
    ones that are rarely faster here (tried only after every tuning move)."""
    values = t.param(name).values
    tiny = shape.elements < 16384 if shape.family != "matmul" else shape.flops < 4_000_000
    if name == "binding":
        return values, ("ctypes",)
    if t.name == "softmax_cpu" and name == "parallel":
        return ((False, True), ()) if tiny or shape.rows < 2 else (values, (False,))
    if t.name == "layernorm_cpu" and name == "parallel":
        if tiny:
            return ("none", "rows", "split"), ()
        if shape.rows < 8 and shape.cols >= 16384:
            return ("split", "rows", "none"), ("none",)
        return values, ("none",)
    if t.name == "matmul_cpu" and name == "threads":
        return (("one", "all"), ()) if tiny else (values, ("one",))
    if t.name == "rmsnorm_cpu" and name == "threads":
        return (("one", "all"), ()) if tiny else (values, ("one",))
    if t.name == "reduce_cpu" and name == "parallel":
        if tiny:
            return ("none", "out", "split"), ()
        if shape.rows * shape.inner < 8 and shape.cols >= 16384:
            return ("split", "out", "none"), ("none",)
        return values, ("none",)
    return values, ()


def _neighbours(
    template: str, params: Params, shape: Shape, family: list[Template], history: _History, far: bool
) -> Iterator[_Move]:
    t = TEMPLATES[template]
    parent_speed = history.speed_of(template, params)
    for order, p in enumerate(t.params):
        current = params[p.name]
        # Structural moves first while far from the roofline, tuning first once close.
        base = (0 if p.structural == far else 10) + order * 0.01
        if p.numeric:
            i = p.values.index(current)
            for step in (-1, 1):
                j = i + step
                if 0 <= j < len(p.values):
                    score = base - 3 * _trend(t, params, p.name, step, history, parent_speed)
                    yield _Move(template, {**params, p.name: p.values[j]}, score, Change(p.name, current, p.values[j]))
        else:
            # Less promising values (later in the preference order) come later, fallbacks last.
            ordered, fallbacks = _preference(t, p.name, shape)
            for rank, v in enumerate(ordered):
                if v != current:
                    score = base + 2 * rank + (15 if v in fallbacks else 0)
                    yield _Move(template, {**params, p.name: v}, score, Change(p.name, current, v))
    # Another template of the family, carrying over the parameters it shares.
    for other in family:
        if other.name == template:
            continue
        carried = {n: v for n, v in params.items() if any(q.name == n and v in q.values for q in other.params)}
        score = (0.5 if far else 12) + (20 if history.failing(other.name) else 0)
        yield _Move(other.name, {**other.defaults(), **carried}, score, Change("template", template, other.name))


def _trend(t: Template, params: Params, name: str, step: int, history: _History, parent_speed: float | None) -> int:
    """1 when the parent sits on a slope going this way: the point one step back (the other direction) was
    tried and is slower than the parent, so keep going; else 0."""
    p = t.param(name)
    i = p.values.index(params[name]) - step
    if parent_speed is None or not 0 <= i < len(p.values):
        return 0
    try:
        behind = t.normalise({**params, name: p.values[i]})
    except ValueError:
        return 0
    speed = history.speed_of(t.name, behind)
    return 1 if speed is not None and speed * 1.01 < parent_speed else 0


# ------------------------------------------------------------------------------------------- words


def _idea(t: Template, params: Params, shape: Shape, change: Change | None, parent: dict[str, Any] | None) -> IdeaSpec:
    what = t.describe(params)
    if change is None:
        text = f"{t.name}: {what}"
    elif change.param == "template":
        text = f"From the best so far ({change.old}), switch to {t.name}: {what}"
    else:
        text = f"From the best so far ({t.name}), change {change.param} {change.old} → {change.new}: {what}"
    gain = expected_gain(t, params, shape, change, parent)
    return IdeaSpec(text=text, expected_gain=gain, template=t.name, params=dict(params))
