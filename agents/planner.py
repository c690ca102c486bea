"""The planner: k optimisation ideas per round, each branching from the best candidate so far."""

from __future__ import annotations

from typing import Any

from agents import builtin
from agents.base import Idea, RoleContext, best_candidate, message


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


def catalog_parent(state: dict[str, Any]) -> dict[str, Any] | None:
    """The candidate the builtin catalog's next ideas branch from: ``to_build_on`` among the candidates a template
    made (in a builtin run, all of them), so the catalog's own search goes on the same beside a model's ideas."""
    best = best_candidate(state)  # type: ignore[arg-type]
    if best and best.get("template"):
        return best  # type: ignore[return-value]
    return fastest_accepted({"candidates": [c for c in state.get("candidates", []) if c.get("template")]})


def builtin_ideas(state: dict[str, Any], ctx: RoleContext, round_: int, first: int = 0) -> list[Idea]:
    """Up to ``ideas`` of the builtin catalog's ideas for this round, ids from ``r<round>i<first>``; none where no
    template applies to the problem or the catalog's search space is spent."""
    best = catalog_parent(state)
    parent = {"template": best.get("template"), "params": best.get("params")} if best else None
    specs = builtin.propose(
        ctx.problem.info, ctx.settings.device, ctx.settings.ideas, tried_summary(state), parent, ctx.settings.policy
    )
    return [
        Idea(
            id=f"r{round_}i{first + j}",
            round=round_,
            parent_id=best["id"] if best else None,
            text=spec.text,
            expected_gain=spec.expected_gain,
            author="builtin",
            params={"template": spec.template, "params": dict(spec.params)},
        )
        for j, spec in enumerate(specs)
    ]


def idea_lines(ideas: list[Idea]) -> str:
    return "\n".join(f"- {i['id']}: {i['text']} (expect: {i['expected_gain']})" for i in ideas) or "no ideas"


class BuiltinPlanner:
    """Ideas from the builtin catalog: a spread of templates first, then neighbours of the best."""

    name = "planner"
    fan_out = False

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        round_ = state.get("round", 0) + 1
        family = builtin.recognise(ctx.problem.info)
        ideas = builtin_ideas(state, ctx, round_)
        update: dict[str, Any] = {"round": round_, "ideas": ideas}
        if not ideas:
            update["stop_reason"] = (
                "no builtin idea applies to this problem" if family is None else "the builtin search space is exhausted"
            )
        update["messages"] = [
            message("planner", "decision", f"family {family}; round {round_} ideas:\n{idea_lines(ideas)}", round_)
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
        n = ctx.settings.implementations  # each idea written n times, by coders that each take their own route
        ideas = [
            Idea(
                id=f"r{round_}i{j * n + v}",
                round=round_,
                parent_id=d.get("parent_id"),
                text=d["text"],
                expected_gain=d.get("expected_gain", ""),
                author=ctx.settings.model,
                params={"implementation": v + 1, "of": n} if n > 1 else {},
            )
            for j, d in enumerate(drafts[: ctx.settings.ideas])
            for v in range(n)
        ]
        update: dict[str, Any] = {"round": round_}
        if ctx.settings.seed_builtin:
            # The catalog's search goes on beside the model's ideas: the run keeps the best of both, and is never
            # worse than the builtin team alone (its ideas are rendered, not written: agents.coder.LLMCoder).
            seeds = builtin_ideas(state, ctx, round_, first=len(ideas))
            if seeds:
                update["messages"] = [
                    message("planner", "decision", f"builtin ideas beside the model's:\n{idea_lines(seeds)}", round_)
                ]
            ideas += seeds
        update["ideas"] = ideas
        if not ideas:
            update["stop_reason"] = "the planner proposed no ideas"
        return update


def make_planner(settings: Any) -> BuiltinPlanner | LLMPlanner:
    return BuiltinPlanner() if settings.model == "builtin" else LLMPlanner()
