"""Start or resume a run: build the role context, compile the graph with the run's checkpointer, stream.

Every step is checkpointed with ``durability="sync"`` before the next starts, so a killed run loses
no finished step, and ``resume`` re-evaluates no candidate that was already evaluated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from agents.base import RoleContext
from graphs.builder import build_graph
from graphs.config import RunConfig
from graphs.runs import RunPaths, checkpointer, clear_failure, load_state, record_failure, thread_config
from sandbox.backends import job_memory_bytes, make_sandbox
from tools.problem import load_problem

log = structlog.get_logger(__name__)


def make_context(config: RunConfig, paths: RunPaths) -> RoleContext:
    extras: dict[str, Any] = {"available_bytes": job_memory_bytes(config.sandbox, config.device)}
    if config.model != "builtin":
        from agents.llm import ChatSession
        from agents.models import parse_model

        usage = load_state(paths).get("usage", {})  # on resume, what earlier sessions already spent
        extras["chat"] = ChatSession.from_spec(
            parse_model(config.model, config.base_url),
            timeout_s=config.llm_timeout_s,
            temperature=config.temperature,
            max_tokens_per_call=config.max_tokens_per_call,
            price=config.prices,
            max_tokens=config.budgets.tokens,
            max_dollars=config.budgets.dollars,
            spent_tokens=int(sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in usage.values())),
            spent_dollars=sum(u.get("dollars", 0) for u in usage.values()),
        )
    return RoleContext(
        problem=load_problem(config.problem),
        sandbox=make_sandbox(config.sandbox),
        settings=config,
        run_dir=paths.dir,
        extras=extras,
    )


def stream_run(
    config: RunConfig, paths: RunPaths, *, resume: bool, on_update: Callable[[str, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run (or continue) the graph to the end; return the final saved state. An error on the way is kept in the
    run's run.json (``kforge runs`` shows it) and raised on."""
    clear_failure(paths)
    try:
        _stream(config, paths, resume, on_update)
    except Exception as exc:
        record_failure(paths, exc)
        raise
    return load_state(paths)


def _stream(
    config: RunConfig, paths: RunPaths, resume: bool, on_update: Callable[[str, dict[str, Any]], None] | None
) -> None:
    ctx = make_context(config, paths)
    graph = build_graph(ctx).compile(checkpointer=checkpointer(paths))
    cfg = thread_config(paths, config.recursion_limit)
    inputs = None if resume else {"run_id": paths.run_id, "started_at": time.time()}
    structlog.contextvars.bind_contextvars(run_id=paths.run_id)
    try:
        for chunk in _updates(graph.stream(inputs, cfg, stream_mode="updates", durability="sync")):
            if on_update:
                on_update(*chunk)
    finally:
        structlog.contextvars.unbind_contextvars("run_id")
        close = getattr(ctx.sandbox, "close", None)
        if close:
            close()


def _updates(stream: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for chunk in stream:
        for node, update in chunk.items():
            yield node, update or {}
