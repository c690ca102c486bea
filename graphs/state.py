"""The search graph's state: a TypedDict whose list fields merge through reducers.

Nodes return partial updates. ``candidates`` merges by id, so the profiler and the critic can add to
a candidate the coder created; ``messages``, ``feedback`` and ``usage`` accumulate.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from agents.base import Candidate, Idea, Message, best_candidate, message

__all__ = ["RunInput", "RunOutput", "RunState", "best_candidate", "merge_by_id", "merge_usage", "message"]


def merge_by_id(left: list[Candidate], right: list[Candidate]) -> list[Candidate]:
    merged: dict[str, Candidate] = {c["id"]: c for c in left}
    for c in right:
        merged[c["id"]] = {**merged.get(c["id"], {}), **c}  # type: ignore[typeddict-item]
    return list(merged.values())


def merge_usage(left: dict[str, dict[str, float]], right: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {role: dict(v) for role, v in left.items()}
    for role, values in right.items():
        mine = out.setdefault(role, {})
        for key, value in values.items():
            mine[key] = mine.get(key, 0) + value
    return out


class RunInput(TypedDict):
    run_id: str
    started_at: float


class RunState(TypedDict, total=False):
    run_id: str
    started_at: float
    round: int
    max_rounds: int  # the loop's cap, kept in state so a resumed run keeps the one it started with
    ideas: list[Idea]
    candidates: Annotated[list[Candidate], merge_by_id]
    best_id: str | None
    baseline: dict[str, Any] | None
    feedback: Annotated[list[str], operator.add]
    messages: Annotated[list[Message], operator.add]
    usage: Annotated[dict[str, dict[str, float]], merge_usage]
    rounds_without_improvement: int
    stop_reason: str | None
    idea: Idea  # set only in the input of a fan-out branch


class RunOutput(TypedDict, total=False):
    best_id: str | None
    candidates: list[Candidate]
    baseline: dict[str, Any] | None
    stop_reason: str | None
