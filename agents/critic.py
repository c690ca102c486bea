"""The critic: judges this round's candidates, keeps the best, writes feedback, decides whether to go on.

The verdict is a ``Literal``: ``accepted`` (verified, timed, a real number) or ``rejected`` (with the
reason). A candidate must pass the harness's own checks (fresh seeded inputs, untouched inputs, a
correct result from a timed call) and the static anti-cheat checks of ``tools.checks`` (issue 6): a
trick found in its source rejects it, naming the trick and the line; a precision downgrade only under
the ``strict`` policy.
"""

from __future__ import annotations

import time
from typing import Any

from agents.base import Candidate, RoleContext, best_candidate, message
from sandbox.evaluation import REVIEW_SPEEDUP
from tools import speed
from tools.checks import blocking, static_findings


def budget_stop(state: dict[str, Any], settings: Any) -> str | None:
    b = settings.budgets
    usage = state.get("usage", {})
    job_s = sum(v.get("job_s", 0) for v in usage.values())
    tokens = sum(v.get("input_tokens", 0) + v.get("output_tokens", 0) for v in usage.values())
    dollars = sum(v.get("dollars", 0) for v in usage.values())
    if b.wall_s is not None and time.time() - state.get("started_at", time.time()) >= b.wall_s:
        return f"wall-time budget of {b.wall_s:g} s spent"
    if b.gpu_s is not None and job_s >= b.gpu_s:
        return f"sandbox-time budget of {b.gpu_s:g} s spent"
    if b.tokens is not None and tokens >= b.tokens:
        return f"token budget of {b.tokens} spent"
    if b.dollars is not None and dollars >= b.dollars:
        return f"dollar budget of {b.dollars:g} spent"
    return None


def shown_faster(c: Candidate) -> bool:
    """Faster than the best reference with evidence: its speedup's interval lies above 1 (``tools.speed``). A
    candidate without an interval (saved before they were recorded, or timed fewer than twice) is judged on its point
    estimate, as it was then."""
    if c.get("speed") is None:
        return (c.get("speedup_vs_best") or 0.0) > 1.0
    return c.get("speed") == "faster"


class Critic:
    name = "critic"
    fan_out = False

    def judge(self, c: Candidate, ctx: RoleContext) -> tuple[str, str]:
        if c.get("source"):
            policy = getattr(ctx.settings, "policy", "relaxed")
            found = blocking(static_findings(c["source"], ctx.problem.info), policy)
            if found:
                f = found[0]
                return "rejected", f"anti-cheat: {f.trick} at line {f.line}: {f.detail}"
        if c.get("status") == "rejected":  # a dynamic check in the worker: the reason names the trick
            return "rejected", f"anti-cheat: {c.get('reason')}"
        if c.get("status") != "ok":
            return "rejected", f"{c.get('status')}: {c.get('reason')}"
        if c.get("speedup_vs_best") is None:
            return "rejected", "verified but not timed"
        speedup = c["speedup_vs_best"]
        review = f"; over {REVIEW_SPEEDUP:g}×: flagged for review" if speedup > REVIEW_SPEEDUP else ""
        reduced = "; computes in reduced precision, as the relaxed policy allows" if c.get("reduced_precision") else ""
        interval = c.get("speedup_interval")
        said = speed.describe(speedup, tuple(interval) if interval else None, c.get("speed"))  # type: ignore[arg-type]
        return "accepted", f"verified on fresh inputs; {said} vs the best reference{review}{reduced}"

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        round_ = state.get("round", 0)
        candidates = state.get("candidates", [])
        updates, messages = [], []
        for c in candidates:
            if c.get("verdict") is None:
                verdict, reason = self.judge(c, ctx)
                updates.append(Candidate(id=c["id"], verdict=verdict, critic_reason=reason))  # type: ignore[typeddict-item]
                messages.append(message("critic", "decision", f"{c['id']}: {verdict} — {reason}", round_, c["id"]))
        judged = {u["id"]: u for u in updates}
        accepted = [
            c for c in candidates if judged.get(c["id"], c).get("verdict") == "accepted" and c.get("speedup_vs_best")
        ]
        proven = [c for c in accepted if shown_faster(c)]
        previous = best_candidate(state)  # type: ignore[arg-type]
        previous_speedup = previous.get("speedup_vs_best", 1.0) if previous else 1.0
        champion = max(proven, key=lambda c: c["speedup_vs_best"], default=None)
        improved = champion is not None and champion["speedup_vs_best"] > max(previous_speedup or 1.0, 1.0)
        best_id = champion["id"] if improved else state.get("best_id")
        stale = 0 if improved else state.get("rounds_without_improvement", 0) + 1
        this_round = [c for c in candidates if c.get("round") == round_]
        lines = [f"round {round_}: {len(this_round)} candidates"]
        for c in sorted(this_round, key=lambda c: -(c.get("speedup_vs_best") or 0)):
            lines.append(f"- {c['id']} ({c.get('idea', '')[:80]}): {judged.get(c['id'], c).get('critic_reason')}")
        lines.append(f"best so far: {best_id or 'the reference'}" + (" (new)" if improved else ""))
        feedback = "\n".join(lines)

        stop = budget_stop(state, ctx.settings)
        if stop is None and round_ >= state.get("max_rounds", ctx.settings.rounds):
            stop = f"completed {round_} rounds"
        if stop is None and stale >= ctx.settings.patience:
            stop = f"no improvement for {stale} rounds"
        update: dict[str, Any] = {
            "candidates": updates,
            "best_id": best_id,
            "rounds_without_improvement": stale,
            "feedback": [feedback],
            "messages": [
                *messages,
                message("critic", "decision", feedback + (f"\nstop: {stop}" if stop else ""), round_),
            ],
        }
        if stop:
            update["stop_reason"] = stop
        return update


class LLMCritic(Critic):
    """The builtin judgement (verdicts are facts, not opinions), plus a chat model's feedback."""

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        from agents.llm_roles import LLMCritic as Strategy

        update = super().__call__(state, ctx)
        round_ = state.get("round", 0)
        # The candidates as judged just now: this round's, with their code, and the best after this round.
        judged = {u["id"]: u for u in update["candidates"]}
        merged = {c["id"]: {**c, **judged.get(c["id"], {})} for c in state.get("candidates", [])}
        review = Strategy(ctx.extras["chat"], device=ctx.settings.device, policy=ctx.settings.policy).review(
            problem_source=ctx.problem.source,
            candidates=[c for c in merged.values() if c.get("round") == round_],
            best=merged.get(update["best_id"]) if update.get("best_id") else None,
            round=round_,
            rounds_left=max(0, ctx.settings.rounds - round_),
            baseline=state.get("baseline"),
        )
        for cid, why in review.get("reasons", {}).items():
            if cid in judged:
                judged[cid]["critic_reason"] = f"{judged[cid]['critic_reason']}; reviewer: {why}"
        update["feedback"] = [update["feedback"][0] + "\nreviewer: " + str(review.get("feedback", ""))]
        if review.get("stop") and "stop_reason" not in update:
            update["stop_reason"] = "the critic judged further rounds unpromising"
        return update


def make_critic(settings: Any) -> Critic:
    return Critic() if settings.model == "builtin" else LLMCritic()
