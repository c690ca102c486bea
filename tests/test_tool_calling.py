"""LLM tool calling: the sandboxed tools as LangChain tools, and the coder's tool-calling loop.

The model is scripted (``ScriptedChatModel`` answers with AIMessages that carry ``tool_calls``); the
tools are real: CPU candidates go through a real ``LocalSandbox``, CUDA kernels through NVRTC (no GPU).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from agents.answers import ParseError
from agents.base import RoleContext
from agents.coder import LLMCoder
from agents.llm import ChatSession
from agents.llm_roles import parse_candidate
from agents.llm_tools import CandidateSource, ToolStats, _host_line, make_tools
from graphs.config import RunConfig
from sandbox.devices import CPU, DeviceTurns
from sandbox.local import LocalSandbox
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tests.fake_openai_server import ScriptedChatModel
from tools.paths import cache_dir
from tools.problem import load_problem
from tools.protocol import TimingConfig, TimingReport, TimingStats

QUICK = TimingConfig(min_trials=20, min_seconds=0.1, warmup_trials=2)
SANDBOX = LocalSandbox()
GOOD_CPU = (CANDIDATES / "softmax_cpu.py").read_text()
BROKEN_CPU = (FIXTURES / "candidates" / "syntax_error_cpu.py").read_text()
WRONG_CPU = (FIXTURES / "candidates" / "wrong_softmax_cpu.py").read_text()
IDEA = {"id": "r1i0", "round": 1, "parent_id": None, "text": "one C loop per row", "expected_gain": "2x"}
IDEA.update(author="fake", params={})


def marker_line(source: str) -> int:
    (line,) = [i for i, text in enumerate(source.splitlines(), 1) if "COMPILE ERROR ON THIS LINE" in text]
    return line


def context(tmp_path: Path, device: str = "cpu", chat: ChatSession | None = None) -> RoleContext:
    config = RunConfig(
        problem=str(PROBLEMS / "softmax_small.py"), device=device, model="openai:fake", timing=QUICK, n_checks=2
    )
    extras: dict[str, Any] = {"available_bytes": 8 << 30}
    if chat is not None:
        extras["chat"] = chat
    return RoleContext(load_problem(config.problem), SANDBOX, config, tmp_path, extras)


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def session_for(*answers: str | AIMessage) -> tuple[ChatSession, ScriptedChatModel]:
    model = ScriptedChatModel(messages=iter(answers))
    return ChatSession(model, model_name="fake", price=None, sleep=lambda s: None), model


# ------------------------------------------------------------------------------- the coder's loop


def test_coder_compiles_a_draft_reads_the_log_and_answers(tmp_path: Path) -> None:
    first = AIMessage(
        content="Let me compile a draft first.",
        tool_calls=[
            tool_call("compile_candidate", {"source": BROKEN_CPU}, "call_1"),
            tool_call("run_shell", {"cmd": "ls"}, "call_2"),  # no such tool: an error result, no crash
        ],
    )
    final = f"Fixed the undeclared name.\n\n```python\n{GOOD_CPU}```\n"
    chat, model = session_for(first, final)
    ctx = context(tmp_path, chat=chat)

    source = LLMCoder(repairs=0).write(IDEA, {"candidates": []}, ctx, error=None, failed_source=None)

    assert source == GOOD_CPU
    assert len(model.seen) == 2
    prompt = model.seen[0][-1].content
    assert "`compile_candidate`" in prompt and "`check_candidate`" in prompt and "```python" in prompt
    # The second request carries the model's tool calls and one ToolMessage per call.
    assert model.seen[1][2] is first or model.seen[1][2].tool_calls == first.tool_calls
    results = {m.tool_call_id: m for m in model.seen[1] if isinstance(m, ToolMessage)}
    assert set(results) == {"call_1", "call_2"}
    compiled = results["call_1"]
    assert compiled.status == "success" and compiled.name == "compile_candidate"
    assert compiled.content.startswith("compile_error")
    assert "row_max" in compiled.content
    assert f".py:{marker_line(BROKEN_CPU)}: error" in compiled.content  # the candidate's own line
    unknown = results["call_2"]
    assert (
        unknown.status == "error" and "no tool 'run_shell'" in unknown.content and "check_candidate" in unknown.content
    )

    asked, answered = chat.calls
    assert [t["name"] for t in asked.tool_calls] == ["compile_candidate", "run_shell"]
    assert [t["ok"] for t in asked.tool_calls] == [True, False]
    assert asked.tool_calls[0]["id"] == "call_1" and asked.tool_calls[0]["result"].startswith("compile_error")
    assert asked.tool_calls[0]["args"]["source"].endswith(f"({len(BROKEN_CPU)} chars)")  # clipped for the trace
    assert asked.tool_calls[1]["args"] == {"cmd": "ls"}
    assert asked.prompt == prompt and asked.answer == "Let me compile a draft first."
    assert answered.tool_calls == [] and answered.ok and "2 tool call(s)" in answered.prompt
    assert asked.summary()["tool_calls"] == ["compile_candidate", "run_shell"]
    assert ctx.extras["tool_stats"].calls == {"compile_candidate": 1}


def test_a_tool_call_is_charged_its_jobs_seconds_not_its_wait_for_the_hosts_turn(tmp_path: Path) -> None:
    ask = AIMessage(content="", tool_calls=[tool_call("check_candidate", {"source": GOOD_CPU}, "call_1")])
    chat, _ = session_for(ask, f"Checked.\n\n```python\n{GOOD_CPU}```\n")
    ctx = context(tmp_path, chat=chat)
    held, release = threading.Event(), threading.Event()

    def hold_the_cpu() -> None:  # another job of this host holds the CPU's turn for 2 s
        with DeviceTurns([CPU], cache_dir("locks")).hold(exclusive=True):
            held.set()
            release.wait(2.0)

    other = threading.Thread(target=hold_the_cpu)
    other.start()
    held.wait()
    try:
        LLMCoder(repairs=0).write(IDEA, {"candidates": []}, ctx, error=None, failed_source=None)
    finally:
        release.set()
        other.join()
    (entry,) = chat.calls[0].tool_calls
    assert entry["job_s"] == ctx.extras["tool_stats"].job_s["check_candidate"] > 0
    assert entry["seconds"] > 1.5 and entry["job_s"] < entry["seconds"] - 1.5  # the wait is no sandbox time


# --------------------------------------------------------------------- the loop, with fake tools


def fake_tools(log: list[str]) -> list[StructuredTool]:
    def echo(source: str) -> str:
        log.append(source)
        return f"ok: {len(source)} chars"

    def broken(source: str) -> str:
        raise RuntimeError("the sandbox fell over")

    return [
        StructuredTool.from_function(echo, name="echo", description="Echo.", args_schema=CandidateSource),
        StructuredTool.from_function(broken, name="broken", description="Raise.", args_schema=CandidateSource),
    ]


def test_tool_failures_become_error_messages_and_the_round_limit_holds() -> None:
    calls: list[str] = []
    answers = [
        AIMessage(
            content="",
            tool_calls=[tool_call("broken", {"source": "x"}, "a"), tool_call("echo", {"text": "wrong arg"}, "b")],
        ),
        AIMessage(content="", tool_calls=[tool_call("echo", {"source": "abc"}, "c")]),
        AIMessage(content="", tool_calls=[tool_call("echo", {"source": "again"}, "d")]),  # past the limit
        f"```python\n{GOOD_CPU}```",
    ]
    chat, model = session_for(*answers)
    value, record = chat.ask_with_tools(
        "coder", "sys", "user", tools=fake_tools(calls), parse=parse_candidate, max_tool_rounds=2, max_reasks=1
    )
    assert value == GOOD_CPU and record is chat.calls[-1]
    assert calls == ["abc"]  # the call past the limit was never run
    first = {m.tool_call_id: m for m in model.seen[1] if isinstance(m, ToolMessage)}
    assert first["a"].status == "error" and "the sandbox fell over" in first["a"].content
    assert first["b"].status == "error" and "source" in first["b"].content  # argument validation failed
    refused = [m for m in model.seen[3] if isinstance(m, ToolMessage) and m.tool_call_id == "d"]
    assert refused and refused[0].status == "error" and "limit of 2 rounds" in refused[0].content
    assert "no fenced code block" in model.seen[3][-1].content  # and the re-ask says what is missing
    assert [len(c.tool_calls) for c in chat.calls] == [2, 1, 1, 0]
    assert [c.reask for c in chat.calls] == [0, 0, 0, 1]
    assert not chat.calls[2].ok and chat.calls[2].tool_calls[0]["ok"] is False


def test_a_model_that_only_calls_tools_ends_in_a_parse_error() -> None:
    loop = [AIMessage(content="", tool_calls=[tool_call("echo", {"source": "s"}, f"id{i}")]) for i in range(6)]
    chat, model = session_for(*loop)
    with pytest.raises(ParseError):
        chat.ask_with_tools("coder", "s", "u", tools=fake_tools([]), parse=parse_candidate, max_tool_rounds=2)
    assert len(model.seen) == 2 + 3  # two tool rounds, then the first answer and two re-asks


# ------------------------------------------------------------------------------ the tools directly


def test_check_and_profile_through_the_sandbox(tmp_path: Path) -> None:
    stats = ToolStats()
    tools = {t.name: t for t in make_tools(context(tmp_path), candidate_id="c9-9", stats=stats)}
    assert set(tools) == {"compile_candidate", "check_candidate", "profile_candidate"}
    assert tools["check_candidate"].args_schema is CandidateSource

    wrong = tools["check_candidate"].invoke({"source": WRONG_CPU})
    assert wrong.startswith("incorrect:") and "max abs error" in wrong

    profiled = tools["profile_candidate"].invoke({"source": GOOD_CPU})
    m = re.search(r"speedup vs eager (\d+\.\d+)x", profiled)
    assert m and float(m.group(1)) > 0, profiled
    assert "eager      median" in profiled and "candidate  median" in profiled and "spread" in profiled

    assert tools["compile_candidate"].invoke({"source": GOOD_CPU}).startswith("ok")
    assert stats.calls == {"check_candidate": 1, "profile_candidate": 1, "compile_candidate": 1}


def test_compile_candidate_uses_nvrtc_for_cuda_without_running_anything(tmp_path: Path) -> None:
    ctx = context(tmp_path, device="cuda")
    ctx.sandbox = None  # type: ignore[assignment]  # nothing may reach a sandbox
    (compile_tool, *_) = make_tools(ctx, candidate_id="c1-0")
    broken = (FIXTURES / "candidates" / "syntax_error_cuda.py").read_text()
    text = compile_tool.invoke({"source": broken})
    assert text.startswith("compile_error") and f"c1-0.py:{marker_line(broken)}" in text and "row_max" in text
    assert compile_tool.invoke({"source": (CANDIDATES / "softmax_cuda.py").read_text()}).startswith("ok")
    assert "not valid Python" in compile_tool.invoke({"source": "def f(:\n"})


def test_ncu_candidate_comes_with_ncu_and_never_profiles_flagged_code(tmp_path: Path) -> None:
    ctx = context(tmp_path, device="cuda")
    ctx.settings.ncu = True
    ctx.sandbox = None  # type: ignore[assignment]  # a refused source must not reach a sandbox
    stats = ToolStats()
    tools = {t.name: t for t in make_tools(ctx, candidate_id="c1-0", stats=stats)}
    assert set(tools) == {"compile_candidate", "check_candidate", "profile_candidate", "ncu_candidate"}
    text = tools["ncu_candidate"].invoke({"source": (FIXTURES / "cheats" / "side_stream_torch.py").read_text()})
    assert text.startswith("not profiled: c1-0.py: the static anti-cheat checks reject it (side_stream"), text
    assert stats.calls == {"ncu_candidate": 1}


def _stats(host_ms: float | None) -> TimingStats:
    return TimingStats(
        trials=1, median_ms=1, mean_ms=1, min_ms=1, p10_ms=1, p90_ms=1, iqr_ms=0, std_ms=0, host_median_ms=host_ms
    )


def test_the_profile_tool_names_the_host_time_only_where_the_timing_hid_it() -> None:
    stats = {"eager": _stats(0.02), "candidate": _stats(0.09)}
    hidden = TimingReport(method="cuda_events", input_sets=1, flush_bytes=0, launch_hidden=True, stats=stats, seconds=1)
    assert "eager 0.0200 ms, candidate 0.0900 ms" in _host_line(hidden)
    counted = hidden.model_copy(update={"launch_hidden": False})  # the host is in the times already
    assert _host_line(counted) == ""
