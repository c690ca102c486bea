"""The coder: turns one idea into a candidate, checks it, and repairs it from the log when it can."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import structlog

from agents import builtin
from agents.answers import ParseError
from agents.base import Candidate, Idea, RoleContext, larger_memory, message
from agents.llm import LLMError
from sandbox.evaluation import Evaluation, evaluate

log = structlog.get_logger(__name__)


def candidate_id(idea: Idea) -> str:
    return f"c{idea['round']}-{idea['id'].split('i')[-1]}"


def candidate_of(idea: Idea, **fields: Any) -> Candidate:
    """The candidate record of ``idea`` (its id, round, parent and text), with ``fields`` beside them."""
    return Candidate(  # type: ignore[typeddict-item]
        id=candidate_id(idea),
        round=idea["round"],
        idea_id=idea["id"],
        parent_id=idea["parent_id"],
        idea=idea["text"],
        **fields,
    )


def check(source: str, cid: str, ctx: RoleContext) -> Evaluation:
    """Compile and verify a source on fresh seeded inputs (no timing: that is the profiler's job)."""
    s = ctx.settings
    return evaluate(
        ctx.problem,
        source,
        sandbox=ctx.sandbox,
        device=s.device,
        available_bytes=ctx.extras["available_bytes"],
        candidate_name=f"{cid}.py",
        policy=s.policy,
        references=("eager",),
        n_checks=s.n_checks,
        seed=s.seed,
        time_candidate=False,
        with_roofline=False,
    )


def failure_log(ev: Evaluation) -> str:
    """What a repair needs to see: the status line and the compiler log or traceback."""
    r = ev.result
    return f"{r.status}: {r.reason}\n{r.details}".strip()[-6000:]


def save(run_dir: Path, cid: str, source: str, ev: Evaluation) -> None:
    folder = Path(run_dir) / "candidates" / cid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "source.py").write_text(source)
    (folder / "result.json").write_text(ev.model_dump_json(indent=1))
    compile_logs = "\n\n".join(r.log for r in ev.result.compile if r.log)
    (folder / "compile.log").write_text(compile_logs or (ev.result.details if ev.status == "compile_error" else ""))


class Coder(ABC):
    """One idea → one checked candidate. ``write`` produces source; ``repairs`` bounds the retries."""

    name = "coder"
    fan_out = True

    def __init__(self, repairs: int) -> None:
        self.repairs = repairs

    @abstractmethod
    def write(
        self, idea: Idea, state: dict[str, Any], ctx: RoleContext, error: str | None, failed_source: str | None
    ) -> str | None:
        """The candidate's source, or None to give up. For a repair, ``error`` is the failed attempt's
        log and ``failed_source`` its source."""

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        idea: Idea = state["idea"]
        cid = candidate_id(idea)
        bound = log.bind(role="coder", candidate_id=cid, round=idea["round"])
        messages = []
        source = self.write(idea, state, ctx, error=None, failed_source=None)
        attempts, ev, jobs_s = 0, None, 0.0
        while source is not None:
            attempts += 1
            ev = check(source, cid, ctx)
            jobs_s += ev.result.wall_s
            bound.info("candidate_checked", attempt=attempts, status=ev.status, reason=ev.result.reason)
            messages.append(
                message(
                    "coder", "tool_result", f"check #{attempts}: {ev.status}: {ev.result.reason}", idea["round"], cid
                )
            )
            if ev.status == "ok" or attempts > self.repairs:
                break
            try:
                repaired = self.write(idea, state, ctx, error=failure_log(ev), failed_source=source)
            except (ParseError, LLMError) as exc:  # the attempt checked stands; the model failed on its repair
                bound.warning("repair_failed", reason=str(exc))
                messages.append(message("coder", "error", f"repair failed: {exc}", idea["round"], cid))
                break
            if repaired is None or repaired == source:
                break
            source = repaired
        if source is None or ev is None:
            return {"messages": [message("coder", "error", "no source produced", idea["round"], cid)]}
        save(ctx.run_dir, cid, source, ev)
        candidate = candidate_of(
            idea,
            source=source,
            attempts=attempts,
            status=ev.status,
            reason=ev.result.reason,
            correctness=ev.result.correctness.model_dump() if ev.result.correctness else None,
            reduced_precision=ev.reduced_precision,
            timing=None,
            memory=larger_memory(None, ev.result.memory),
        )
        candidate.update(template=idea["params"].get("template"), params=idea["params"].get("params"))  # type: ignore[typeddict-item]
        return {
            "candidates": [candidate],
            "messages": messages,
            "usage": {"coder": {"jobs": attempts, "job_s": jobs_s}},
        }


def render_idea(idea: Idea, ctx: RoleContext, error: str | None) -> str | None:
    """A catalog idea's source, rendered from its template; None for a repair: templates are correct by
    construction, so there is nothing to repair."""
    if error is not None or "template" not in idea["params"]:
        return None
    return builtin.render(idea["params"]["template"], idea["params"]["params"], ctx.settings.device)


class BuiltinCoder(Coder):
    """Renders the catalog template the builtin planner chose."""

    def write(
        self, idea: Idea, state: dict[str, Any], ctx: RoleContext, error: str | None, failed_source: str | None
    ) -> str | None:
        return render_idea(idea, ctx, error)


class LLMCoder(Coder):
    """Asks the chat model for the source; on a compile error or wrong answer, shows it the log.

    The model may compile, check and time its drafts in the sandbox first (``agents.llm_tools``).
    """

    def write(
        self, idea: Idea, state: dict[str, Any], ctx: RoleContext, error: str | None, failed_source: str | None
    ) -> str | None:
        from agents.llm_roles import LLMCoder as Strategy
        from agents.llm_tools import make_tools

        if "template" in idea["params"]:  # the builtin catalog's idea (RunConfig.seed_builtin): no model needed
            return render_idea(idea, ctx, error)
        parent = next((c for c in state.get("candidates", []) if c["id"] == idea["parent_id"]), None)
        # A repair starts from the attempt that failed; a first attempt from the idea's parent.
        base = failed_source if error is not None else (parent.get("source") if parent else None)
        return Strategy(ctx.extras["chat"], policy=ctx.settings.policy).write(
            problem_source=ctx.problem.source,
            device=ctx.settings.device,
            idea=dict(idea),
            parent_source=base,
            error=error,
            tools=make_tools(ctx, role=self.name, candidate_id=candidate_id(idea)),
            baseline=state.get("baseline"),
            parent=dict(parent) if parent and error is None else None,
        )


def make_coder(settings: Any) -> Coder:
    if settings.model == "builtin":
        return BuiltinCoder(repairs=0)
    return LLMCoder(repairs=settings.repair_attempts)


def load_result(run_dir: Path, cid: str) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "candidates" / cid / "result.json").read_text())
