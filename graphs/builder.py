"""The search graph: baseline → the configured roles, round after round → finalize.

The roles come from the registry in the order ``RunConfig.roles`` lists them; a role with
``fan_out = True`` (the coder) runs once per idea of the round through ``Send``. The builder knows
nothing about what a role does, so adding a role means registering it and naming it in the config.
After every node a router sends the run to ``finalize`` as soon as ``stop_reason`` is set.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import structlog
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from agents import registry
from agents.answers import ParseError
from agents.base import Role, RoleContext
from agents.coder import candidate_id, candidate_of
from agents.llm import BudgetExceeded, LLMError
from graphs.rundata import precision_text
from graphs.state import RunInput, RunOutput, RunState, best_candidate, merge_usage, message
from sandbox.evaluation import evaluate
from tools.keys import redact

log = structlog.get_logger(__name__)
MODEL_FAILED = "model_failed"  # the status of a coder branch whose model gave no usable answer (_contained)
Node = Callable[[dict[str, Any]], dict[str, Any]]


def baseline(state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
    """Time the reference eagerly and under torch.compile, and put the roofline floor beside it."""
    if state.get("baseline"):
        return {}
    s = ctx.settings
    references = ("eager", "compile") if s.compile_reference else ("eager",)
    ev = evaluate(
        ctx.problem,
        None,
        sandbox=ctx.sandbox,
        device=s.device,
        available_bytes=ctx.extras["available_bytes"],
        policy=s.policy,
        references=references,
        seed=s.seed,
        timing=s.timing,
    )
    if ev.status != "ok" or ev.result.timing is None:
        return {"stop_reason": f"the reference itself failed: {ev.result.reason}"}
    stats = ev.result.timing.stats
    eager = stats["eager"].median_ms
    compiled = stats["compile"].median_ms if "compile" in stats else None
    data = {
        "eager_ms": eager,
        "compile_ms": compiled,
        "compile_over_eager": ev.result.timing.ratio("compile", "eager") if compiled else None,
        "best_reference": ev.result.timing.best_reference,
        "floor_ms": ev.floor.floor_ms if ev.floor else None,
        "bound": ev.floor.bound if ev.floor else None,
        "device": ev.result.environment,
        "ceilings": ev.ceilings.model_dump() if ev.ceilings else None,
        "warnings": ev.warnings,
        "memory": ev.result.memory.model_dump() if ev.result.memory else None,
        "job_s": ev.result.wall_s,
    }
    text = f"eager {eager:.4f} ms, compile {compiled if compiled is None else round(compiled, 4)} ms"
    if data["floor_ms"]:
        text += f", floor {data['floor_ms']:.4f} ms ({data['bound']}-bound)"
    for warning in ev.warnings:
        log.warning("problem_warning", warning=warning)
        text += f"\nWARNING: {warning}"
    return {
        "baseline": data,
        "round": 0,
        "max_rounds": s.rounds,
        "messages": [message("baseline", "tool_result", text, 0)],
        "usage": {"baseline": {"jobs": 1, "job_s": ev.result.wall_s}},
    }


def finalize(state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
    """Write the best verified candidate as a standalone file, and the run report."""
    best = best_candidate(state)  # type: ignore[arg-type]
    folder = ctx.run_dir / "best"
    folder.mkdir(parents=True, exist_ok=True)
    if best:
        (folder / "model_new.py").write_text(best["source"])
        (folder / "candidate.json").write_text(json.dumps({k: v for k, v in best.items() if k != "source"}, indent=1))
        headline = (
            f"best: {best['id']} at {best['speedup_vs_best']:.3f}× vs the faster of eager and torch.compile\n\n"
            f"precision: {precision_text(best.get('reduced_precision'))}"
        )
    else:
        headline = "no verified candidate beat the reference: the result is the reference (speedup 1.0)"
        (folder / "README.md").write_text(headline + "\n")
    (ctx.run_dir / "report.md").write_text(redact(report(state, headline)))  # verdicts are redacted; so is this
    return {"messages": [message("finalize", "decision", headline, state.get("round", 0))]}


def report(state: dict[str, Any], headline: str) -> str:
    b = state.get("baseline") or {}
    lines = [f"# Run {state.get('run_id')}", "", headline, "", f"stopped: {state.get('stop_reason')}", ""]
    lines += [
        f"reference: eager {b.get('eager_ms')} ms, torch.compile {b.get('compile_ms')} ms, floor {b.get('floor_ms')} ms"
    ]
    lines += [f"\n**Warning:** {w}" for w in b.get("warnings", [])]
    lines += [
        "",
        "| id | parent | round | status | verdict | vs best | % roofline | idea |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in state.get("candidates", []):
        sp = c.get("speedup_vs_best")
        pct = c.get("pct_roofline")
        lines.append(
            f"| {c['id']} | {c.get('parent_id') or 'reference'} | {c.get('round')} | {c.get('status')} | "
            f"{c.get('verdict')} | {'' if sp is None else f'{sp:.3f}×'} | {'' if pct is None else f'{pct:.1f}%'} | "
            f"{c.get('idea', '')[:90]} |"
        )
    return "\n".join(lines) + "\n"


def _usage_of(calls: list[Any]) -> dict[str, dict[str, float]]:
    usage: dict[str, dict[str, float]] = {}
    for call in calls:
        u = usage.setdefault(call.role, {})
        for key in ("input_tokens", "output_tokens", "dollars", "seconds"):
            u[key] = u.get(key, 0) + (getattr(call, key, 0) or 0)
        u["llm_calls"] = u.get("llm_calls", 0) + 1
        if call.tool_calls:  # sandbox jobs the model asked for count against the sandbox-time budget
            u["tool_calls"] = u.get("tool_calls", 0) + len(call.tool_calls)
            # The jobs' own seconds: a call that waited a minute for the host's turn ran a job of a second.
            u["job_s"] = u.get("job_s", 0) + sum(t.get("job_s", t.get("seconds", 0)) for t in call.tool_calls)
    return usage


def wrap(name: str, fn: Callable[[dict[str, Any], RoleContext], dict[str, Any]], ctx: RoleContext) -> Node:
    """Log the node's start and end, account its LLM calls, and turn a spent budget or a model that failed for good
    into a clean stop (``_contained``)."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        bound = log.bind(run_id=state.get("run_id"), role=name, round=state.get("round", 0))
        if "idea" in state:
            bound = bound.bind(idea_id=state["idea"]["id"])
        chat = ctx.extras.get("chat")
        bound.info("node_start")
        # This node's own calls: parallel branches share the session, never their records.
        with chat.recording() if chat is not None else contextlib.nullcontext([]) as calls:
            try:
                update = fn(state, ctx)
            except BudgetExceeded as exc:
                bound.warning("budget_exceeded", reason=str(exc))
                update = {"stop_reason": f"budget: {exc}"}
            except (ParseError, LLMError) as exc:
                update = _contained(name, state, exc, bound)
        if calls:
            update = {**update, "usage": merge_usage(update.get("usage", {}), _usage_of(calls))}
            cid = candidate_id(state["idea"]) if "idea" in state else None
            # The prompts and answers first: the node's own messages (a check's result) come of them.
            update["messages"] = [*_call_messages(calls, state.get("round", 0), cid), *update.get("messages", [])]
        bound.info("node_end", keys=sorted(update))
        return update

    return node


def _contained(name: str, state: dict[str, Any], exc: ParseError | LLMError, bound: Any) -> dict[str, Any]:
    """A model that failed for good (no usable answer after its re-asks, or a call failed past its retries) ends
    only what it was asked for: a branch (one idea's coder) ends as a candidate without source (``MODEL_FAILED``, the
    model's failure its reason) and its siblings go on; any other role
    ends the search, and ``finalize`` still writes the report and ``best/`` from what the run has."""
    if "idea" in state:
        bound.warning("branch_failed", reason=str(exc))
        idea, cid = state["idea"], candidate_id(state["idea"])
        why = f"the model failed: {exc}"
        # A candidate without source, so that the history, the critic and the report all say what became of the idea.
        failed = candidate_of(
            idea,
            source="",
            attempts=0,
            status=MODEL_FAILED,
            reason=why,
            timing=None,
        )
        said = message(name, "error", f"no candidate: {why}", idea["round"], cid)
        return {"candidates": [failed], "messages": [said]}
    bound.warning("role_failed", reason=str(exc))
    return {"stop_reason": f"{name} failed: {exc}"}


def _call_messages(calls: list[Any], round_: int, candidate_id: str | None) -> list[dict[str, Any]]:
    """Trace messages for the LLM calls a node made: prompt, answer, and each tool call with its result."""
    out = []
    for call in calls:
        out.append(message(call.role, "prompt", call.prompt, round_, candidate_id))
        out.append(message(call.role, "answer", call.answer, round_, candidate_id))
        for tool in call.tool_calls:
            args = tool.get("args")
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else str(args)
            out.append(message(call.role, "tool_call", f"{tool['name']}({shown})", round_, candidate_id))
            out.append(message(call.role, "tool_result", f"{tool['name']}: {tool['result']}", round_, candidate_id))
    return out


def _router(roles: list[Role], target: int) -> Callable[[dict[str, Any]], Any]:
    def route(state: dict[str, Any]) -> Any:
        if state.get("stop_reason"):
            return "finalize"
        role = roles[target]
        if not role.fan_out:
            return role.name
        ideas = state.get("ideas", [])
        if not ideas:  # nothing to fan out to this round: the next role still runs
            return roles[(target + 1) % len(roles)].name
        return [Send(role.name, {**state, "idea": idea}) for idea in ideas]

    return route


def build_graph(ctx: RoleContext) -> StateGraph:
    """The uncompiled graph; compile it with a checkpointer (tests use an in-memory one)."""
    roles = [registry.create(name, ctx.settings) for name in ctx.settings.roles]
    graph = StateGraph(RunState, input_schema=RunInput, output_schema=RunOutput)
    graph.add_node("baseline", wrap("baseline", baseline, ctx))
    for role in roles:
        graph.add_node(role.name, wrap(role.name, role, ctx))
    graph.add_node("finalize", wrap("finalize", finalize, ctx))
    graph.add_edge(START, "baseline")
    graph.add_conditional_edges("baseline", _router(roles, 0))
    for i, role in enumerate(roles):
        graph.add_conditional_edges(role.name, _router(roles, (i + 1) % len(roles)))
    graph.add_edge("finalize", END)
    return graph
