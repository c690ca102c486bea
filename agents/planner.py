"""The planner: k optimisation ideas per round, each branching from the best candidate so far."""

from __future__ import annotations

from typing import Any

from agents import builtin
from agents.base import Idea, RoleContext
from graphs.state import best_candidate, message


def tried_summary(state: dict[str, Any]) -> list[dict[str, Any]]:
    """What every earlier candidate was and how it did: the planners' memory."""
    return [
        {
            "id": c["id"],
            "round": c.get("round"),
            "parent_id": c.get("parent_id"),
            "idea": c.get("idea", ""),
            "template": c.get("template"),
            "params": c.get("params"),
            "status": c.get("status"),
            "reason": c.get("reason"),
            "speedup_vs_best": c.get("speedup_vs_best"),
            "speedup_vs_eager": c.get("speedup_vs_eager"),
            "pct_roofline": c.get("pct_roofline"),
            "diagnosis": c.get("diagnosis"),
            "reduced_precision": c.get("reduced_precision"),
            "verdict": c.get("verdict"),
            "critic_reason": c.get("critic_reason"),
        }
        for c in state.get("candidates", [])
    ]


def fastest_accepted(state: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest candidate the critic accepted, whether or not it beat the reference."""
    timed = [c for c in state.get("candidates", []) if c.get("verdict") == "accepted" and c.get("speedup_vs_best")]
    return max(timed, key=lambda c: c["speedup_vs_best"], default=None)


def to_build_on(state: dict[str, Any]) -> dict[str, Any] | None:
    """The candidate the next round starts from: the best, else (while none beats the reference) the fastest
    verified one, a near miss being a better place to search from than the reference."""
    return best_candidate(state) or fastest_accepted(state)  # type: ignore[arg-type,return-value]


class BuiltinPlanner:
    """Ideas from the builtin catalog: a spread of templates first, then neighbours of the best."""

    name = "planner"
    fan_out = False

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        round_ = state.get("round", 0) + 1
        best = to_build_on(state)
        parent = {"template": best.get("template"), "params": best.get("params")} if best else None
        family = builtin.recognise(ctx.problem.info)
        specs = builtin.propose(
            ctx.problem.info, ctx.settings.device, ctx.settings.ideas, tried_summary(state), parent, ctx.settings.policy
        )
        ideas = [
            Idea(
                id=f"r{round_}i{j}",
                round=round_,
                parent_id=best["id"] if best else None,
                text=spec.text,
                expected_gain=spec.expected_gain,
                author="builtin",
                params={"template": spec.template, "params": dict(spec.params)},
            )
            for j, spec in enumerate(specs)
        ]
        update: dict[str, Any] = {"round": round_, "ideas": ideas}
        if not ideas:
            update["stop_reason"] = (
                "no builtin idea applies to this problem" if family is None else "the builtin search space is exhausted"
            )
        summary = "\n".join(f"- {i['id']}: {i['text']} (expect: {i['expected_gain']})" for i in ideas) or "no ideas"
        update["messages"] = [
            message("planner", "decision", f"family {family}; round {round_} ideas:\n{summary}", round_)
        ]
        return update


class LLMPlanner:
    """Ideas from a chat model, given the problem, everything tried so far and the critic's feedback."""

    name = "planner"
    fan_out = False

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        from agents.llm_roles import LLMPlanner as Strategy

        round_ = state.get("round", 0) + 1
        best = to_build_on(state)
        feedback = state.get("feedback", [])
        drafts = Strategy(ctx.extras["chat"], policy=ctx.settings.policy).propose(
            problem_source=ctx.problem.source,
            device=ctx.settings.device,
            k=ctx.settings.ideas,
            history=tried_summary(state),
            best=dict(best) if best else None,
            feedback=feedback[-1] if feedback else "",
            baseline=state.get("baseline"),
        )
        ideas = [
            Idea(
                id=f"r{round_}i{j}",
                round=round_,
                parent_id=d.get("parent_id"),
                text=d["text"],
                expected_gain=d.get("expected_gain", ""),
                author=ctx.settings.model,
                params={},
            )
            for j, d in enumerate(drafts[: ctx.settings.ideas])
        ]
        update: dict[str, Any] = {"round": round_, "ideas": ideas}
        if not ideas:
            update["stop_reason"] = "the planner proposed no ideas"
        return update


def make_planner(settings: Any) -> BuiltinPlanner | LLMPlanner:
    return BuiltinPlanner() if settings.model == "builtin" else LLMPlanner()
