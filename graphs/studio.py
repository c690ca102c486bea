"""The search graph for LangGraph Studio and ``langgraph dev`` (named in the top-level ``langgraph.json``).

The server calls ``make_graph`` for every request with the run's ``RunnableConfig``; the problem and
the run's settings come from its ``configurable`` keys (Studio's assistant settings), else from
``KFORGE_STUDIO_*`` environment variables, else the CPU-sized softmax with the builtin team. The server
brings its own checkpointer, so a Studio run is not a ``runs/<id>`` folder that ``kforge trace`` reads;
its candidates and best kernel still land in ``runs/studio/<thread id>/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from graphs.builder import build_graph
from graphs.config import RunConfig
from graphs.launch import make_context
from graphs.runs import RunPaths, runs_root
from sandbox.backends import make_sandbox
from sandbox.config import LocalSandboxConfig, Sandbox
from tools.device import resolve_device

SETTINGS = ("problem", "device", "model", "base_url", "policy", "rounds", "ideas")
DEFAULTS = {"problem": "softmax_small", "device": "auto", "model": "builtin", "rounds": "3", "ideas": "3"}


def studio_config(configurable: dict[str, Any]) -> RunConfig:
    from graphs.cli_options import resolve_problem

    values = {k: os.environ.get(f"KFORGE_STUDIO_{k.upper()}", DEFAULTS.get(k)) for k in SETTINGS}
    values |= {k: configurable[k] for k in SETTINGS if configurable.get(k) is not None}
    values = {k: v for k, v in values.items() if v is not None}
    values["problem"] = str(resolve_problem(str(values["problem"])))
    values["device"] = resolve_device(str(values["device"]))
    return RunConfig.model_validate(values)


@functools.cache
def _sandbox() -> Sandbox:
    """One sandbox per server process: every graph build would otherwise start its own fork server."""
    return make_sandbox(LocalSandboxConfig())


@functools.lru_cache(maxsize=16)
def _graph(settings_json: str, thread: str) -> CompiledStateGraph:
    run_config = RunConfig.model_validate_json(settings_json)
    ctx = make_context(run_config, RunPaths(runs_root() / "studio" / thread))
    return build_graph(dataclasses.replace(ctx, sandbox=_sandbox())).compile()


def build_studio_graph(config: RunnableConfig) -> CompiledStateGraph:
    configurable = dict(config.get("configurable") or {})
    # cached: loading a problem runs its reference once, and the server asks for the graph on every request
    return _graph(studio_config(configurable).model_dump_json(), str(configurable.get("thread_id") or "preview"))


async def make_graph(config: RunnableConfig) -> CompiledStateGraph:
    """The factory langgraph.json names; the build (file reads, the reference's first run) goes to a thread
    so that the server's event loop never blocks on it."""
    return await asyncio.to_thread(build_studio_graph, config)
