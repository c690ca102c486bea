"""What every agent role shares: the records they pass around and the ``Role`` protocol.

A role is one node of the search graph. It reads the run's state (and, for a fan-out role such as
the coder, the one idea it was sent) and returns a partial state update. Roles never call each
other; the graph decides who runs next.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

if TYPE_CHECKING:
    from sandbox.config import Sandbox
    from tools.problem import Problem

Verdict = Literal["accepted", "rejected"]


class Idea(TypedDict):
    """One optimisation idea in plain language, tied to the candidate it branches from."""

    id: str
    round: int
    parent_id: str | None  # None: start from the reference
    text: str  # what to change
    expected_gain: str  # and why it should help, with a number where possible
    author: str  # "builtin" or the model's name
    params: dict[str, Any]  # for the builtin coder: template name and parameters; {} for LLM ideas


class Candidate(TypedDict, total=False):
    """A candidate kernel and everything the loop learned about it. Updated by id across roles."""

    id: str
    round: int
    idea_id: str
    parent_id: str | None
    idea: str
    source: str
    attempts: int  # coder tries, repairs included
    status: str  # JobResult status of the last evaluation: ok, compile_error, incorrect, ...
    reason: str  # one line: why that status
    correctness: dict[str, Any] | None  # CorrectnessReport as a dict
    reduced_precision: list[str]  # where it computes below the problem's precision (the relaxed policy allows it)
    timing: dict[str, float] | None  # median ms per contender: eager, candidate (and compile)
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    speedup_vs_best: float | None
    speedup_interval: list[float] | None  # 95% interval of speedup_vs_best (tools.speed), from the profiler's timing
    speed: str | None  # what the interval allows saying: faster, slower, not distinguishable (tools.speed.verdict)
    pct_roofline: float | None
    diagnosis: str | None  # the profiler's: memory-bound / compute-bound / latency-bound, and why
    verdict: Verdict | None  # the critic's
    critic_reason: str | None
    memory: dict[str, Any] | None  # the MemoryReport (as a dict) of its job that used the most device memory


def larger_memory(held: dict[str, Any] | None, new: Any) -> dict[str, Any] | None:
    """Of a candidate's MemoryReport so far (a dict) and a job's new one (a MemoryReport or None), the larger peak."""
    fresh = new.model_dump() if new is not None else None
    if held is None or (fresh is not None and fresh["peak_bytes"] > held["peak_bytes"]):
        return fresh
    return held


class Message(TypedDict):
    """One entry of a role's trace: a prompt, an answer, a tool call or a decision."""

    role: str
    kind: Literal["prompt", "answer", "tool_call", "tool_result", "decision", "error"]
    content: str
    candidate_id: str | None
    round: int


@dataclass
class RoleContext:
    """What roles need besides the state: the problem, the sandbox, the run's settings, a logger."""

    problem: Problem
    sandbox: Sandbox
    settings: Any  # graphs.config.RunConfig (kept untyped here to avoid an import cycle)
    run_dir: Any  # pathlib.Path of runs/<run_id>
    extras: dict[str, Any] = field(default_factory=dict)


class Role(Protocol):
    """A node of the search graph.

    ``fan_out`` roles are called once per idea of the round (LangGraph ``Send``), with the idea under
    the state key ``"idea"``; the others once per round.
    """

    name: str
    fan_out: bool

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]: ...


def best_candidate(state: Mapping[str, Any]) -> Candidate | None:
    """The run's best candidate (``best_id`` in the search graph's state), or None."""
    best_id = state.get("best_id")
    return next((c for c in state.get("candidates", []) if c["id"] == best_id), None)


def message(role: str, kind: str, content: str, round_: int, candidate_id: str | None = None) -> Message:
    """A trace message of ``role`` (the graph's ``messages`` list keeps them in order)."""
    return Message(role=role, kind=kind, content=content, candidate_id=candidate_id, round=round_)  # type: ignore[typeddict-item]
