"""The LLM side of the roles: model specs, the chat session (retries, re-asks, budget, usage), parsers,
prompt snapshots, and a real langchain-openai client against a fake OpenAI-compatible server.

No network beyond 127.0.0.1. ``UPDATE_SNAPSHOTS=1`` rewrites ``tests/snapshots/``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from langchain_core.exceptions import ModelAuthenticationError, ModelRateLimitError
from langchain_core.messages import AIMessage
from pydantic import Field

from agents.answers import ParseError, extract_code, extract_json, render_prompt
from agents.base import RoleContext
from agents.llm import BudgetExceeded, CallRecord, ChatSession, LLMError, transient_reason
from agents.llm_roles import LLMCoder, LLMCritic, LLMPlanner, parse_ideas, parse_review, tools_section
from agents.llm_tools import make_tools
from agents.models import PLACEHOLDER_API_KEY, ModelSpec, default_model, make_chat_model, parse_model, price_for
from tests.fake_openai_server import FakeOpenAIServer, ScriptedChatModel
from tools.errors import ConfigError

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(96, 3000)]


def get_init_inputs():
    return []
"""

CANDIDATE = '''import cupy
import torch
import torch.nn as nn

SRC = r"""
extern "C" __global__ void softmax_rows(const float* x, float* y, long long cols) { /* ... */ }
"""
_mod = cupy.RawModule(code=SRC, options=("-std=c++17",))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y, n = torch.empty_like(x), cupy.int64(x.shape[1])
        with cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device)):
            _mod.get_function("softmax_rows")((x.shape[0],), (512,), (x.data_ptr(), y.data_ptr(), n))
        return y
'''

HISTORY: list[dict[str, Any]] = [
    {
        "id": "c1",
        "round": 1,
        "parent_id": None,
        "idea": "one block per row, two passes",
        "status": "ok",
        "speedup_vs_best": 0.91,
        "speedup_vs_eager": 1.2,
        "pct_roofline": 42.0,
        "diagnosis": "memory-bound: 42% of copy bandwidth",
        "critic_reason": "correct but reads the row twice",
        "source": CANDIDATE,
    },
    {
        "id": "c2",
        "round": 1,
        "parent_id": None,
        "idea": "warp per row",
        "status": "incorrect",
        "reason": "max abs err 0.3 at row 7",
    },
    {
        "id": "c3",
        "round": 1,
        "parent_id": None,
        "idea": "exp in bfloat16",
        "status": "ok",
        "speedup_vs_best": 0.95,
        "reduced_precision": ["precision_downgrade at line 9: uses torch.bfloat16, below the problem's precision"],
    },
]
BEST = HISTORY[0]


def fenced(label: str, body: str) -> str:
    return f"```{label}\n{body.rstrip()}\n```"


def ideas_json(*parents: str | None) -> str:
    items = [{"text": f"idea {i}", "expected_gain": f"{i}0%", "parent_id": p} for i, p in enumerate(parents)]
    return "Here is the plan.\n\n" + fenced("json", json.dumps(items))


def session_for(*answers: str | AIMessage, **kwargs: Any) -> tuple[ChatSession, ScriptedChatModel]:
    model = ScriptedChatModel(messages=iter(answers))
    kwargs.setdefault("sleep", lambda s: None)
    return ChatSession(model, model_name="fake", **kwargs), model


# ------------------------------------------------------------------------------------ model specs


def test_parse_model_accepts_the_supported_forms() -> None:
    assert parse_model("builtin", None) == ModelSpec("builtin", "builtin")
    assert parse_model(" BUILTIN ", None).is_builtin
    assert parse_model("openai:gpt-4o", None) == ModelSpec("openai", "gpt-4o")
    assert parse_model("google_genai:gemini-2.5-pro", None) == ModelSpec("google_genai", "gemini-2.5-pro")
    assert parse_model("openai:qwen", "http://127.0.0.1:8000/v1/") == ModelSpec(
        "openai", "qwen", "http://127.0.0.1:8000/v1"
    )
    # A bare name on a served model goes through the openai provider; a bare address gets /v1.
    assert parse_model("llama3.1:8b-instruct", "http://localhost:11434").base_url == "http://localhost:11434/v1"
    assert parse_model("qwen2.5-coder", "http://localhost:8080") == ModelSpec(
        "openai", "qwen2.5-coder", "http://localhost:8080/v1"
    )
    assert parse_model("openai:gpt-4o", None).label == "openai:gpt-4o"


@pytest.mark.parametrize(
    ("spec", "base_url", "words"),
    [
        ("", None, "empty --model"),
        ("gpt-4o", None, "names no provider"),
        ("anthropic:claude", None, "unsupported model provider 'anthropic'"),
        ("openai:", None, "bad model name"),
        ("openai:two words", None, "bad model name"),
        ("google_genai:gemini-2.5-pro", "http://localhost:8000/v1", "openai provider"),
        ("builtin", "http://localhost:8000/v1", "--base-url needs a served model"),
        ("openai:x", "localhost:8000", "bad --base-url"),
    ],
)
def test_parse_model_errors_are_one_line(spec: str, base_url: str | None, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_model(spec, base_url)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFORGE_MODEL", raising=False)
    assert default_model() == "builtin"
    monkeypatch.setenv("KFORGE_MODEL", "openai:gpt-4o")
    assert default_model() == "openai:gpt-4o"


def test_make_chat_model_needs_a_key_for_hosted_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_chat_model(parse_model("openai:gpt-4o"), timeout_s=10)
    with pytest.raises(ConfigError, match="GOOGLE_API_KEY"):
        make_chat_model(parse_model("google_genai:gemini-2.5-flash"), timeout_s=10)
    with pytest.raises(ConfigError, match="builtin"):
        make_chat_model(parse_model("builtin"), timeout_s=10)
    # A served model without a key gets a placeholder (local servers do not check it).
    model = make_chat_model(parse_model("openai:m", "http://127.0.0.1:9/v1"), timeout_s=3)
    assert model.openai_api_key.get_secret_value() == PLACEHOLDER_API_KEY
    assert model.max_retries == 0 and model.request_timeout == 3


def test_make_chat_model_builds_both_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-test")
    openai_model = make_chat_model(parse_model("openai:gpt-4o"), timeout_s=30)
    assert type(openai_model).__name__ == "ChatOpenAI" and openai_model.model_name == "gpt-4o"
    google_model = make_chat_model(parse_model("google_genai:gemini-2.5-flash"), timeout_s=30)
    assert type(google_model).__name__ == "ChatGoogleGenerativeAI" and google_model.max_retries == 0


def test_prices() -> None:
    assert price_for("gpt-4o") == (2.50, 10.00)
    assert price_for("gpt-4o-mini-2024-07-18") == (0.15, 0.60)
    assert price_for("models/gemini-2.5-pro") == (1.25, 10.00)
    assert price_for("my-local-llama") is None


# ----------------------------------------------------------------------------------------- parsers


def test_extract_code_takes_the_last_python_block_with_modelnew() -> None:
    old = "class ModelNew(nn.Module):\n    pass\n"
    text = f"First try:\n{fenced('python', old)}\nBetter:\n{fenced('py', CANDIDATE)}\nUse it like:\n" + fenced(
        "python", "m = ModelNew()"
    )
    assert extract_code(text) == CANDIDATE
    assert extract_code(fenced("", CANDIDATE)) == CANDIDATE
    assert extract_code(fenced("cuda", "__global__ void k() {}") + "\n" + fenced("python", CANDIDATE)) == CANDIDATE


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("class ModelNew(nn.Module): pass", "no fenced code block"),
        (fenced("python", "class Model(nn.Module):\n    pass"), "no `class ModelNew"),
        ("```python\nclass ModelNew(nn.Module):\n    pass\n", "never closed"),
        (fenced("json", "{}"), "no fenced ```python code block"),
    ],
)
def test_extract_code_errors(text: str, words: str) -> None:
    with pytest.raises(ParseError, match=words):
        extract_code(text)


def test_extract_json() -> None:
    assert extract_json(fenced("json", '{"a": 1}')) == {"a": 1}
    assert extract_json("  [1, 2]  ") == [1, 2]
    assert extract_json('Sure. {"feedback": "x", "stop": false} Hope it helps.') == {"feedback": "x", "stop": False}
    assert extract_json(fenced("", '["x"]')) == ["x"]
    with pytest.raises(ParseError, match="not valid JSON"):
        extract_json(fenced("json", "{'a': 1}"))
    with pytest.raises(ParseError, match="no JSON found"):
        extract_json("no json here")


def test_render_prompt_needs_every_value() -> None:
    assert "could not be used: boom" in render_prompt("reask", error="boom")
    with pytest.raises(ConfigError, match=r"\$error"):
        render_prompt("reask")
    with pytest.raises(ConfigError, match="no prompt template"):
        render_prompt("nope")


# ------------------------------------------------------------------------------------------ roles


def test_planner_parses_ideas_and_fixes_parent_ids() -> None:
    session, model = session_for(ideas_json("c1", "c9", None, "null"))
    ideas = LLMPlanner(session).propose(PROBLEM, "cuda", 3, HISTORY, BEST, "try one pass")
    assert ideas == [
        {"text": "idea 0", "expected_gain": "00%", "parent_id": "c1"},
        {"text": "idea 1", "expected_gain": "10%", "parent_id": "c1"},  # c9 is unknown: the best's id
        {"text": "idea 2", "expected_gain": "20%", "parent_id": None},
    ]
    assert len(session.calls) == 1 and session.calls[0].role == "planner" and session.calls[0].ok
    prompt = model.seen[0][-1].text
    assert "exactly 3" in prompt and "try one pass" in prompt and "c2 (round 1" in prompt


def test_planner_without_best_falls_back_to_the_reference() -> None:
    ideas = parse_ideas(ideas_json("c7"), 1, set(), None)
    assert ideas[0]["parent_id"] is None
    with pytest.raises(ParseError, match="expected 2 ideas, got 1"):
        parse_ideas(ideas_json(None), 2, set(), None)
    with pytest.raises(ParseError, match='no "text"'):
        parse_ideas(fenced("json", '[{"expected_gain": "x"}]'), 1, set(), None)


def test_coder_extracts_code() -> None:
    session, model = session_for("Plan: one pass.\n\n" + fenced("python", CANDIDATE))
    source = LLMCoder(session).write(PROBLEM, "cuda", {"text": "online softmax", "parent_id": "c1"}, CANDIDATE, None)
    assert source == CANDIDATE
    user = model.seen[0][-1].text
    assert "Start from the parent candidate c1" in user and "online softmax" in user


def test_coder_reasks_with_the_parse_error_and_uses_the_second_answer() -> None:
    session, model = session_for("I would use shared memory.", fenced("python", CANDIDATE))
    source = LLMCoder(session).write(PROBLEM, "cuda", {"text": "shared memory"}, None, None)
    assert source == CANDIDATE
    assert len(model.seen) == 2
    reask = model.seen[1]
    assert [m.type for m in reask] == ["system", "human", "ai", "human"]
    assert reask[2].text == "I would use shared memory."
    assert "no fenced code block found" in reask[3].text and "could not be used" in reask[3].text
    first, second = session.calls
    assert not first.ok and "no fenced code block" in (first.error or "") and first.reask == 0
    assert second.ok and second.reask == 1 and second.prompt == reask[3].text


def test_coder_gives_up_after_max_reasks() -> None:
    session, model = session_for("no code", "still none", "nope")
    with pytest.raises(ParseError, match="no usable answer after 3 tries") as info:
        LLMCoder(session, max_reasks=2).write(PROBLEM, "cuda", {"text": "x"}, None, None)
    assert info.value.answer == "nope" and len(model.seen) == 3 and len(session.calls) == 3


def test_coder_rejects_a_syntax_error_through_a_reask() -> None:
    broken = "class ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n"
    session, model = session_for(fenced("python", broken), fenced("python", CANDIDATE))
    assert LLMCoder(session).write(PROBLEM, "cpu", {"text": "x"}, None, None) == CANDIDATE
    assert "not valid Python: line 2" in model.seen[1][-1].text


def test_repair_uses_the_repair_prompt() -> None:
    session, model = session_for(fenced("python", CANDIDATE))
    LLMCoder(session).write(PROBLEM, "cuda", {"text": "x"}, CANDIDATE, "kernel.cu(3): error: identifier undefined")
    user = model.seen[0][-1].text
    assert "## Task: repair a candidate" in user and "identifier undefined" in user


def test_critic_review() -> None:
    answer = fenced(
        "json", json.dumps({"feedback": "fuse passes", "stop": "false", "reasons": {"c1": "ok", "zz": "?"}})
    )
    session, model = session_for(answer)
    review = LLMCritic(session).review(PROBLEM, HISTORY, BEST, 1, 2)
    assert review == {"feedback": "fuse passes", "stop": False, "reasons": {"c1": "ok"}}
    assert "Rounds left after this one: 2" in model.seen[0][-1].text
    with pytest.raises(ParseError, match='"stop" must be true or false'):
        parse_review(fenced("json", '{"feedback": "", "stop": 3}'), set())


# ----------------------------------------------------------------------------------------- session


def test_usage_tokens_and_dollars_are_recorded() -> None:
    usage = {"input_tokens": 1200, "output_tokens": 300, "total_tokens": 1500}
    message = AIMessage(content=fenced("python", CANDIDATE), usage_metadata=usage)
    seen: list[CallRecord] = []
    session, _ = session_for(message, price=(2.0, 10.0), on_call=seen.append)
    with structlog.testing.capture_logs() as logs:
        _, record = session.ask("coder", "sys", "user", parse=extract_code)
    assert (record.input_tokens, record.output_tokens, record.usage_reported) == (1200, 300, True)
    assert record.dollars == pytest.approx((1200 * 2.0 + 300 * 10.0) / 1e6) and record.priced
    assert record.prompt_chars == len("sys") + len("user") and record.attempts == 1
    assert session.total_tokens == 1500 and seen == [record]
    assert session.usage_by_role()["coder"]["input_tokens"] == 1200
    event = next(e for e in logs if e["event"] == "llm_call")
    assert event["role"] == "coder" and event["input_tokens"] == 1200 and "answer" not in event


def test_unknown_usage_is_estimated_and_unpriced_models_cost_nothing() -> None:
    session, _ = session_for("x" * 400)
    _, record = session.ask("critic", "s" * 40, "u" * 40, parse=str)
    assert not record.usage_reported and record.input_tokens == 20 and record.output_tokens == 100
    assert record.dollars == 0 and not record.priced


def test_budget_stops_before_a_call_beyond_it() -> None:
    usage = {"input_tokens": 80, "output_tokens": 40, "total_tokens": 120}
    session, model = session_for(AIMessage(content="a", usage_metadata=usage), "never sent", max_tokens=100)
    session.ask("planner", "s", "u", parse=str)
    with pytest.raises(BudgetExceeded, match="token budget spent: 120 of 100") as info:
        session.ask("planner", "s", "u", parse=str)
    assert info.value.kind == "tokens" and len(model.seen) == 1

    usage = {"input_tokens": 1_000_000, "output_tokens": 0, "total_tokens": 1_000_000}
    session, model = session_for(AIMessage(content="a", usage_metadata=usage), price=(1.0, 1.0), max_dollars=0.5)
    session.ask("planner", "s", "u", parse=str)
    with pytest.raises(BudgetExceeded, match="dollar budget"):
        session.ask("planner", "s", "u", parse=str)
    # A resumed run carries what it already spent.
    session, model = session_for("a", max_tokens=10, spent_tokens=10)
    with pytest.raises(BudgetExceeded):
        session.ask("planner", "s", "u", parse=str)
    assert model.seen == []


class FlakyModel(ScriptedChatModel):
    """Raises the queued exceptions first, then answers."""

    failures: list[Exception] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        if self.failures:
            self.seen.append(list(messages))
            raise self.failures.pop(0)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_transient_errors_are_retried_with_backoff() -> None:
    delays: list[float] = []
    model = FlakyModel(messages=iter(["done"]), failures=[ModelRateLimitError("429"), TimeoutError("slow")])
    session = ChatSession(model, model_name="fake", sleep=delays.append, backoff_s=1.0, jitter=0.0)
    with structlog.testing.capture_logs() as logs:
        answer, record = session.ask("planner", "s", "u", parse=str)
    assert answer == "done" and record.attempts == 3 and delays == [1.0, 2.0]
    assert [e["reason"] for e in logs if e["event"] == "llm_retry"] == ["ModelRateLimitError", "timeout"]


def test_permanent_errors_and_exhausted_retries_raise_llm_error() -> None:
    model = FlakyModel(messages=iter(["never"]), failures=[ModelAuthenticationError("401 bad key")])
    session = ChatSession(model, model_name="fake", sleep=lambda s: None)
    with pytest.raises(LLMError, match="failed: ModelAuthenticationError: 401 bad key") as info:
        session.ask("planner", "s", "u", parse=str)
    assert info.value.attempts == 1 and not session.calls[0].ok

    model = FlakyModel(messages=iter(["never"]), failures=[ModelRateLimitError("429")] * 3)
    session = ChatSession(model, model_name="fake", sleep=lambda s: None, max_attempts=3)
    with pytest.raises(LLMError, match="gave up after 3 attempts"):
        session.ask("planner", "s", "u", parse=str)
    assert session.calls[-1].attempts == 3


def test_transient_reason() -> None:
    class Status(Exception):
        def __init__(self, status_code: int) -> None:
            self.status_code = status_code

    assert transient_reason(Status(429)) == "HTTP 429"
    assert transient_reason(Status(503)) == "HTTP 503"
    assert transient_reason(Status(400)) is None
    assert transient_reason(ConnectionRefusedError()) == "connection"
    assert transient_reason(ValueError("bad")) is None


# --------------------------------------------------------------------------------------- snapshots


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1 to write it"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed: review, then UPDATE_SNAPSHOTS=1"


def both(pair: tuple[str, str]) -> str:
    system, user = pair
    return f"=== system ===\n{system}\n=== user ===\n{user}"


def test_prompt_snapshots() -> None:
    session, _ = session_for()
    planner, coder, critic = LLMPlanner(session), LLMCoder(session), LLMCritic(session)
    baseline = {"eager_ms": 0.5123, "compile_ms": 0.4012, "best_reference": "compile", "floor_ms": 0.1}
    baseline["bound"] = "memory"
    baseline["device"] = {"gpu": "NVIDIA H100 80GB HBM3", "cuda": "13.0", "arch": "sm_90", "sms": "132"}
    baseline["device"].update(threads_per_sm="2048", smem_per_block_bytes="232448", l2_bytes=str(50 << 20))
    baseline["ceilings"] = {"copy_bytes_per_s": 3.01e12, "fp32_flops": 5.1e13, "tf32_flops": 3.8e14}
    check_snapshot("planner", both(planner.prompts(PROBLEM, "cuda", 3, HISTORY, BEST, "fuse the two passes", baseline)))
    check_snapshot("planner_first_round_cpu", both(planner.prompts(PROBLEM, "cpu", 2, [], None, "")))
    idea = {"text": "online softmax in one pass", "expected_gain": "2x fewer reads", "parent_id": "c1"}
    check_snapshot("coder", both(coder.prompts(PROBLEM, "cuda", idea, CANDIDATE, None, baseline=baseline, parent=BEST)))
    check_snapshot(
        "coder_from_reference", both(coder.prompts(PROBLEM, "cuda", {**idea, "parent_id": None}, None, None))
    )
    error = 'kernel.cu(2): error: identifier "cols" is undefined'
    check_snapshot("repair", both(coder.prompts(PROBLEM, "cuda", idea, CANDIDATE, error)))
    check_snapshot("critic", both(critic.prompts(PROBLEM, HISTORY, BEST, 1, 2, baseline)))
    strict = LLMCritic(session, device="cpu", policy="strict").prompts(PROBLEM, HISTORY, BEST, 1, 2)[0]
    check_snapshot("system_strict_cpu", strict)
    # The CPU target's user prompts: its own worked example and hardware sheet.
    cpu = {**baseline, "device": {"cpu": "AMD EPYC 9V74", "threads": "2", "cores": "2", "isa": "avx2 fma avx512f"}}
    cpu["device"].update(l1d_bytes=str(32 << 10), l2_bytes=str(1 << 20), l3_bytes=str(32 << 20))
    cpu["ceilings"] = {"copy_bytes_per_s": 2.1e10, "fp32_flops": 1.8e11}
    cpu_error = "kernel.c:2: error: 'cols' undeclared"
    check_snapshot("coder_cpu", coder.prompts(PROBLEM, "cpu", idea, CANDIDATE, None, baseline=cpu, parent=BEST)[1])
    check_snapshot("repair_cpu", coder.prompts(PROBLEM, "cpu", idea, CANDIDATE, cpu_error, baseline=cpu)[1])
    check_snapshot("critic_cpu", LLMCritic(session, device="cpu").prompts(PROBLEM, HISTORY, BEST, 1, 2, cpu)[1])


def test_the_cpu_target_s_prompts_say_nothing_of_gpus() -> None:
    session, _ = session_for()
    idea = {"text": "one pass", "expected_gain": "2x", "parent_id": None}
    error = "kernel.c:2: error: 'cols' undeclared"
    prompts = [
        *LLMPlanner(session).prompts(PROBLEM, "cpu", 2, HISTORY, BEST, ""),
        *LLMCoder(session).prompts(PROBLEM, "cpu", idea, None, None),
        *LLMCoder(session).prompts(PROBLEM, "cpu", idea, CANDIDATE, error),
        *LLMCritic(session, device="cpu").prompts(PROBLEM, HISTORY, BEST, 1, 2),
    ]
    for text in prompts:
        assert not re.search(r"GPU performance|CuPy|NVRTC|cuBLAS|cuDNN|CUDA C", text), text


def test_coder_prompt_with_tools_snapshot() -> None:
    session, _ = session_for()
    coder = LLMCoder(session, max_tool_rounds=3)
    ctx = RoleContext(problem=None, sandbox=None, settings=SimpleNamespace(device="cuda", ncu=False), run_dir=None)  # type: ignore[arg-type]
    tools = make_tools(ctx)
    idea = {"text": "online softmax in one pass", "expected_gain": "2x fewer reads", "parent_id": "c1"}
    system, user = coder.prompts(PROBLEM, "cuda", idea, CANDIDATE, None, tools)
    assert (system, user.replace(tools_section(tools, 3), "")) == coder.prompts(PROBLEM, "cuda", idea, CANDIDATE, None)
    check_snapshot("coder_with_tools", user)
    error = 'kernel.cu(2): error: identifier "cols" is undefined'
    repair = coder.prompts(PROBLEM, "cuda", idea, CANDIDATE, error, tools)[1]
    assert "`compile_candidate`" in repair and "`check_candidate`" in repair and "at most 3 rounds" in repair


# ------------------------------------------------------------------------ real client, fake server


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAIServer() as fake:
        yield fake


def test_real_openai_client_against_the_fake_server(server: FakeOpenAIServer) -> None:
    server.error(429, "slow down", retry_after=0.5).reply(
        ideas_json(None, "c1"), prompt_tokens=321, completion_tokens=45
    )
    delays: list[float] = []
    spec = parse_model("openai:test-model", base_url=server.url)
    session = ChatSession(make_chat_model(spec, timeout_s=5), sleep=delays.append, backoff_s=0.1, jitter=0.0)
    ideas = LLMPlanner(session).propose(PROBLEM, "cuda", 2, HISTORY, BEST, "")
    assert [i["parent_id"] for i in ideas] == [None, "c1"]
    record = session.calls[-1]
    assert record.attempts == 2 and delays == [0.5]  # the 429's Retry-After beats the 0.1 s backoff
    assert (record.input_tokens, record.output_tokens, record.usage_reported) == (321, 45, True)
    assert len(server.requests) == 2 and server.pending == 0
    body = server.requests[-1]
    assert body["model"] == "test-model" and [m["role"] for m in body["messages"]] == ["system", "user"]
    assert server.headers[-1]["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


def test_sampling_settings_reach_the_server_and_given_prices_make_the_bill(server: FakeOpenAIServer) -> None:
    server.reply(ideas_json(None, "c1"), prompt_tokens=2_000, completion_tokens=500)
    spec = parse_model("openai:test-model", base_url=server.url)
    session = ChatSession.from_spec(spec, timeout_s=5, temperature=0.25, max_tokens_per_call=700, price=(3.0, 15.0))
    LLMPlanner(session).propose(PROBLEM, "cuda", 2, HISTORY, BEST, "")
    body = server.requests[-1]
    assert body["temperature"] == 0.25 and 700 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    record = session.calls[-1]
    assert record.priced and record.dollars == pytest.approx(2_000 * 3.0 / 1e6 + 500 * 15.0 / 1e6)
    # Without prices a model behind a base URL costs nothing, and its record says it was not priced.
    server.reply(ideas_json(None, "c1"), prompt_tokens=2_000, completion_tokens=500)
    free = ChatSession.from_spec(spec, timeout_s=5)
    LLMPlanner(free).propose(PROBLEM, "cuda", 2, HISTORY, BEST, "")
    assert not free.calls[-1].priced and free.calls[-1].dollars == 0.0
    assert "temperature" not in server.requests[-1]


def test_fake_server_server_errors_timeouts_and_streaming(server: FakeOpenAIServer) -> None:
    server.error(500).reply("late", delay_s=1.0).reply("fine", prompt_tokens=7, completion_tokens=2)
    spec = parse_model("openai:test-model", base_url=server.url)
    model = make_chat_model(spec, timeout_s=0.3)
    session = ChatSession(model, sleep=lambda s: None, max_attempts=3)
    answer, record = session.ask("critic", "s", "u", parse=str)
    assert answer == "fine" and record.attempts == 3 and record.input_tokens == 7

    server.reply("streamed answer", prompt_tokens=11, completion_tokens=3)
    chunks = list(model.stream("hi"))
    text = "".join(c.text for c in chunks)
    usage = next(c.usage_metadata for c in chunks if c.usage_metadata)
    assert text == "streamed answer" and usage["input_tokens"] == 11 and usage["output_tokens"] == 3

    with pytest.raises(LLMError, match="no canned reply left"):  # an empty queue is a 400: not retried
        session.ask("critic", "s", "u", parse=str)
