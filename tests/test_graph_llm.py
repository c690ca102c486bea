"""The real compiled graph with LLM roles, the model replaced by a scripted fake (or a fake server).

Everything else is real: the sandbox compiles, checks and times every candidate on the CPU twin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from agents.base import RoleContext
from agents.llm import ChatSession
from agents.models import make_chat_model, parse_model
from graphs.builder import build_graph
from graphs.config import Budgets, RunConfig
from sandbox.local import LocalSandbox
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS, ROOT
from tests.fake_openai_server import FakeOpenAIServer, ScriptedChatModel
from tools.problem import load_problem
from tools.protocol import TimingConfig

QUICK = TimingConfig(min_trials=20, min_seconds=0.1, warmup_trials=2)
SANDBOX = LocalSandbox()
IDEA = '```json\n[{"text": "one C loop per row, online max and sum", "expected_gain": "2x", "parent_id": null}]\n```'
TWO_IDEAS = (
    '```json\n[{"text": "one C loop per row, online max and sum", "expected_gain": "2x", "parent_id": null}, '
    '{"text": "rows split over OpenMP threads", "expected_gain": "1.5x", "parent_id": null}]\n```'
)
REVIEW = '```json\n{"feedback": "keep going", "stop": false, "reasons": {}}\n```'


def code(path: Path) -> str:
    return f"Here it is.\n\n```python\n{path.read_text()}```\n"


def run(tmp_path: Path, answers: list[Any], **settings: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    """The graph with every model call answered from ``answers`` in turn (a ``model=`` setting replaces the fake)."""
    model = settings.pop("model", None) or ScriptedChatModel(messages=iter(answers))
    settings.setdefault("seed_builtin", False)  # the model's candidates alone, unless a test asks for the catalog's
    budgets = settings.pop("budgets", Budgets())
    config = RunConfig(
        problem=str(PROBLEMS / "softmax_small.py"),
        device="cpu",
        model="openai:fake",
        ideas=settings.pop("ideas", 1),
        rounds=settings.pop("rounds", 1),
        timing=QUICK,
        compile_reference=False,
        budgets=budgets,
        **settings,
    )
    chat = ChatSession(model, price=None, max_tokens=budgets.tokens, sleep=lambda s: None)
    ctx = RoleContext(
        load_problem(config.problem), SANDBOX, config, tmp_path, {"available_bytes": 8 << 30, "chat": chat}
    )
    graph = build_graph(ctx).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}, "recursion_limit": config.recursion_limit}
    graph.invoke({"run_id": "t", "started_at": time.time()}, cfg)
    return dict(graph.get_state(cfg).values), model


def test_compile_error_is_repaired_from_the_log(tmp_path: Path) -> None:
    answers = [IDEA, code(FIXTURES / "candidates" / "syntax_error_cpu.py"), code(CANDIDATES / "softmax_cpu.py"), REVIEW]
    state, model = run(tmp_path, answers)
    (c,) = state["candidates"]
    assert c["attempts"] == 2 and c["status"] == "ok" and c["verdict"] == "accepted"
    repair_prompt = model.seen[2][-1].content
    assert "compile_error" in repair_prompt and "row_max" in repair_prompt  # the compiler's complaint
    assert state["usage"]["coder"]["llm_calls"] == 2
    assert state["usage"]["coder"]["jobs"] == 2  # the coder's own checks survive the LLM accounting
    assert {m["kind"] for m in state["messages"] if m["role"] == "coder"} >= {"prompt", "answer", "tool_result"}
    assert state["stop_reason"] == "completed 1 rounds"


def test_critic_rejects_a_wrong_candidate_and_the_reference_stands(tmp_path: Path) -> None:
    wrong = code(FIXTURES / "candidates" / "wrong_softmax_cpu.py")
    state, _ = run(tmp_path, [IDEA, wrong, wrong, REVIEW], repair_attempts=1)
    (c,) = state["candidates"]
    assert c["status"] == "incorrect" and c["verdict"] == "rejected"
    assert "incorrect" in c["critic_reason"]
    assert state.get("best_id") is None
    assert "speedup 1.0" in (tmp_path / "best" / "README.md").read_text()


def test_parallel_coder_branches_each_keep_their_own_calls(tmp_path: Path) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")
    state, model = run(tmp_path, [TWO_IDEAS, good, good, REVIEW], ideas=2)
    assert len(model.seen) == 4 and len(state["candidates"]) == 2
    # Both branches ask the model before either ends; each must count its own call, not the other's too.
    assert state["usage"]["coder"]["llm_calls"] == 2
    for c in state["candidates"]:
        kinds = [m["kind"] for m in state["messages"] if m["role"] == "coder" and m["candidate_id"] == c["id"]]
        assert kinds.count("prompt") == 1 and kinds.count("answer") == 1, kinds
        assert kinds.index("prompt") < kinds.index("answer") < kinds.index("tool_result")  # the check came of it


PROSE = "I would rather describe the kernel than write it."


def over_http(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: Callable[[FakeOpenAIServer], Any],
    timeout_s: float = 30,
    **settings: Any,
) -> tuple[dict[str, Any], FakeOpenAIServer]:
    """The graph with its model behind the real OpenAI client, talking to a fake server on 127.0.0.1 whose answers
    ``script`` queues; the run's state, and the server with every request it received and what it billed."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAIServer(models=("test-model",)) as server:
        script(server)
        chat_model = make_chat_model(parse_model("openai:test-model", base_url=server.url), timeout_s=timeout_s)
        state, _ = run(tmp_path, [], model=chat_model, **settings)
        assert server.pending == 0, "the run asked fewer questions than the script answers"
    return state, server


def llm_usage(state: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    """Per role that called the model: (calls, input tokens, output tokens)."""
    return {
        r: (u["llm_calls"], u["input_tokens"], u["output_tokens"])
        for r, u in state["usage"].items()
        if "llm_calls" in u
    }


def test_usage_per_role_is_what_the_server_counted_while_branches_ran_in_parallel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")

    def script(server: FakeOpenAIServer) -> None:
        server.reply(TWO_IDEAS, prompt_tokens=1000, completion_tokens=100)
        server.reply(good, prompt_tokens=2000, completion_tokens=300).reply(
            good, prompt_tokens=2000, completion_tokens=300
        )
        server.reply(REVIEW, prompt_tokens=4000, completion_tokens=50)

    state, server = over_http(tmp_path, monkeypatch, script, ideas=2)
    assert len(server.requests) == 4
    usage = llm_usage(state)
    assert set(usage) == {"planner", "coder", "critic"}
    assert usage["planner"] == (1, 1000, 100) and usage["critic"] == (1, 4000, 50)
    assert usage["coder"] == (2, 4000, 600)  # the server's count, where each branch once counted both


def test_answers_cut_off_at_the_token_limit_cost_their_branch_only_and_are_billed_as_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")
    cut = good[: len(good) // 2]  # the fence opened, never closed

    def script(server: FakeOpenAIServer) -> None:
        server.reply(TWO_IDEAS, prompt_tokens=1000, completion_tokens=100)
        server.reply(good, prompt_tokens=2000, completion_tokens=300)
        for _ in range(3):  # the other branch: cut off, and cut off again on both re-asks
            server.reply(cut, prompt_tokens=2000, completion_tokens=4000, finish_reason="length")
        server.reply(REVIEW, prompt_tokens=4000, completion_tokens=50)

    state, server = over_http(tmp_path, monkeypatch, script, ideas=2)
    _, failed = made_and_failed(state)
    assert "no usable answer after 3 tries" in failed["reason"] and "cut off at its token limit" in failed["reason"]
    reasks = [b["messages"][-1]["content"] for b in server.requests if b["messages"][-1]["role"] == "user"]
    assert sum("cut off at its token limit" in r for r in reasks) == 2  # each re-ask said why
    usage = llm_usage(state)
    assert usage["planner"] == (1, 1000, 100) and usage["critic"] == (1, 4000, 50)
    assert usage["coder"] == (4, 4 * 2000, 300 + 3 * 4000)  # the failed branch's three answers are paid for
    assert state["stop_reason"] == "completed 1 rounds" and (tmp_path / "report.md").exists()


def test_a_tool_call_whose_arguments_are_not_json_is_answered_with_the_error_and_the_coder_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")

    def script(server: FakeOpenAIServer) -> None:
        server.reply(IDEA, prompt_tokens=1000, completion_tokens=100)
        server.tool_call(
            "check_candidate", '{"source": "import torch\nclass ModelNew', prompt_tokens=2000, completion_tokens=40
        )
        server.reply(good, prompt_tokens=2500, completion_tokens=300)
        server.reply(REVIEW, prompt_tokens=4000, completion_tokens=50)

    state, server = over_http(tmp_path, monkeypatch, script)
    (c,) = state["candidates"]
    assert c["status"] == "ok" and c["verdict"] == "accepted"
    answered = server.requests[2]["messages"][-1]  # what the model was sent back for its call
    assert answered["role"] == "tool" and "the arguments of 'check_candidate' could not be read" in answered["content"]
    results = [m["content"] for m in state["messages"] if m["kind"] == "tool_result" and m["role"] == "coder"]
    assert any("could not be read" in r for r in results)
    assert llm_usage(state)["coder"] == (2, 4500, 340) and state["usage"]["coder"]["tool_calls"] == 1
    assert state["usage"]["coder"]["jobs"] == 1  # the coder's own check: the unreadable call ran nothing


def test_rate_limits_server_errors_and_slow_answers_are_retried_and_a_branch_past_its_retries_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")

    def script(server: FakeOpenAIServer) -> None:
        server.error(429, "slow down", retry_after=0.2).reply(TWO_IDEAS, prompt_tokens=1000, completion_tokens=100)
        server.reply(good, prompt_tokens=2000, completion_tokens=300)
        for _ in range(4):  # the other branch: a 500 on every one of its four attempts
            server.error(500, "upstream failed")
        server.reply(REVIEW, delay_s=3.0).reply(REVIEW, prompt_tokens=4000, completion_tokens=50)  # slow, then fine

    state, server = over_http(tmp_path, monkeypatch, script, timeout_s=1.5, ideas=2)
    _, failed = made_and_failed(state)
    assert "gave up after 4 attempts" in failed["reason"] and "upstream failed" in failed["reason"]
    assert len(server.requests) == 2 + 1 + 4 + 2
    # kforge's bill is the answers it received: the failed branch's record costs nothing, the retried calls once. The
    # server also billed the critic's answer the client had stopped waiting for: a cost no client can see.
    assert llm_usage(state) == {"planner": (1, 1000, 100), "coder": (2, 2000, 300), "critic": (1, 4000, 50)}
    assert state["stop_reason"] == "completed 1 rounds" and (tmp_path / "report.md").exists()


def test_a_200_kb_answer_is_parsed_billed_and_kept_out_of_later_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = (CANDIDATES / "softmax_cpu.py").read_text()
    verbose = "Let me reason about the memory traffic once more. " * 4000 + "\n\n" + code(CANDIDATES / "softmax_cpu.py")
    assert len(verbose) > 200_000

    def script(server: FakeOpenAIServer) -> None:
        server.reply(IDEA, prompt_tokens=1000, completion_tokens=100)
        server.reply(verbose, prompt_tokens=2000, completion_tokens=50_000)
        server.reply(REVIEW, prompt_tokens=4000, completion_tokens=50)

    state, server = over_http(tmp_path, monkeypatch, script)
    (c,) = state["candidates"]
    assert c["status"] == "ok" and c["source"] == source  # the file, without the prose around it
    assert llm_usage(state)["coder"] == (1, 2000, 50_000)
    critic = server.requests[-1]["messages"][-1]["content"]
    assert "class ModelNew" in critic and "Let me reason" not in critic and len(critic) < 30_000


def made_and_failed(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The round's two candidates: the one made, accepted, and the one whose model failed, a candidate without source
    that the critic rejected with the model's failure as its reason."""
    by_status = {c["status"]: c for c in state["candidates"]}
    assert sorted(by_status) == ["model_failed", "ok"], [(c["id"], c["status"]) for c in state["candidates"]]
    made, failed = by_status["ok"], by_status["model_failed"]
    assert made["verdict"] == "accepted" and made["id"] != failed["id"]
    assert failed["verdict"] == "rejected" and not failed["source"] and failed["idea"]
    assert failed["critic_reason"].startswith("model_failed: the model failed: coder: ")
    (error,) = [m for m in state["messages"] if m["kind"] == "error"]
    assert error["candidate_id"] == failed["id"] and error["content"] == f"no candidate: {failed['reason']}"
    return made, failed


def test_a_coder_branch_whose_model_answers_in_prose_fails_alone_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")

    def script(server: FakeOpenAIServer) -> None:
        server.reply(TWO_IDEAS, prompt_tokens=1000, completion_tokens=100)
        server.reply(good, prompt_tokens=2000, completion_tokens=300)
        for _ in range(3):  # whichever branch is answered in prose first is re-asked twice more, in prose again
            server.reply(PROSE, prompt_tokens=2000, completion_tokens=20)
        server.reply(REVIEW, prompt_tokens=4000, completion_tokens=50)

    state, _ = over_http(tmp_path, monkeypatch, script, ideas=2)
    _, failed = made_and_failed(state)
    assert "no usable answer after 3 tries" in failed["reason"]
    # The failed branch's three tries are paid for and accounted.
    assert llm_usage(state) == {"planner": (1, 1000, 100), "coder": (4, 8000, 360), "critic": (1, 4000, 50)}
    assert state["stop_reason"] == "completed 1 rounds"
    assert (tmp_path / "report.md").exists() and (tmp_path / "best" / "README.md").exists()
    assert "model_failed" in (tmp_path / "report.md").read_text()


def test_a_repair_the_model_fails_leaves_the_attempt_already_checked(tmp_path: Path) -> None:
    wrong = code(FIXTURES / "candidates" / "wrong_softmax_cpu.py")
    state, _ = run(tmp_path, [IDEA, wrong, PROSE, PROSE, PROSE, REVIEW], repair_attempts=1)
    (c,) = state["candidates"]
    assert c["status"] == "incorrect" and c["attempts"] == 1 and c["verdict"] == "rejected"
    (error,) = [m for m in state["messages"] if m["kind"] == "error"]
    assert error["candidate_id"] == c["id"] and error["content"].startswith("repair failed: coder: no usable answer")
    assert state["stop_reason"] == "completed 1 rounds"


def test_a_planner_whose_model_fails_ends_the_run_with_its_report(tmp_path: Path) -> None:
    state, model = run(tmp_path, [PROSE, PROSE, PROSE])
    assert len(model.seen) == 3
    assert state["stop_reason"].startswith("planner failed: planner: no usable answer after 3 tries")
    assert not state.get("candidates") and (tmp_path / "report.md").exists()
    assert state["usage"]["planner"]["llm_calls"] == 3


def test_two_rounds_route_back_to_the_planner(tmp_path: Path) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")
    state, model = run(tmp_path, [IDEA, good, REVIEW, IDEA, good, REVIEW], rounds=2)
    assert [c["round"] for c in state["candidates"]] == [1, 2]
    assert state["round"] == 2 and len(model.seen) == 6
    assert state["usage"]["planner"]["llm_calls"] == 2


def test_the_planner_and_critic_see_the_history_the_best_and_this_round_s_code(tmp_path: Path) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")
    reviewed = '```json\n{"feedback": "go on", "stop": false, "reasons": {"c1-0": "the online max saves a pass"}}\n```'
    from_first = IDEA.replace('"parent_id": null', '"parent_id": "c1-0"')
    state, model = run(tmp_path, [IDEA, good, reviewed, from_first, good, REVIEW], rounds=2)
    first = next(c for c in state["candidates"] if c["id"] == "c1-0")
    assert first["verdict"] == "accepted" and first["critic_reason"].endswith("; reviewer: the online max saves a pass")
    planner = model.seen[3][-1].content  # the second round's plan
    assert "- c1-0 (round 1, from the reference): ok" in planner and "round ?" not in planner
    assert "critic: verified on fresh inputs" in planner and "reviewer: the online max saves a pass" in planner
    assert "Best candidate so far: c1-0" in planner and "class ModelNew" in planner  # its code, to build on
    coder = model.seen[4][-1].content  # the second round's candidate, built on c1-0
    assert "Start from the parent candidate c1-0" in coder and "How it did: ok" in coder
    assert "The critic: verified on fresh inputs" in coder and "reviewer: the online max saves a pass" in coder
    # Every role is told the times to beat, from this run's baseline.
    assert all("Reference times: eager " in seen[-1].content for seen in model.seen)
    critic = model.seen[5][-1].content  # the second round's review
    assert "### c2-0" in critic and "### c1-0" not in critic  # this round's candidates, not every round's
    assert "class ModelNew" in critic


def test_the_builtin_catalog_s_ideas_run_beside_the_model_s(tmp_path: Path) -> None:
    """--seed-builtin (the default): the round gets the catalog's idea too, rendered without a model call, checked,
    timed and reviewed like the model's; the run keeps the better of the two."""
    state, model = run(tmp_path, [IDEA, code(CANDIDATES / "softmax_cpu.py"), REVIEW], seed_builtin=True)
    by_id = {c["id"]: c for c in state["candidates"]}
    assert sorted(by_id) == ["c1-0", "c1-1"]
    assert by_id["c1-0"]["template"] is None and by_id["c1-1"]["template"]  # the model's, then the catalog's
    assert all(c["status"] == "ok" and c["timing"] for c in by_id.values()), [c.get("reason") for c in by_id.values()]
    assert len(model.seen) == 3  # planner, one coder, critic: the catalog's idea took no model call
    assert "### c1-1" in model.seen[2][-1].content  # the critic reviewed both
    assert any("builtin ideas beside the model's" in m["content"] for m in state["messages"])
    fastest = max(by_id.values(), key=lambda c: c["speedup_vs_best"])
    assert state["best_id"] in (fastest["id"], None)


def test_each_idea_is_written_by_as_many_coders_as_implementations_asks(tmp_path: Path) -> None:
    good = code(CANDIDATES / "softmax_cpu.py")
    state, model = run(tmp_path, [IDEA, good, good, REVIEW], implementations=2)
    assert sorted(c["id"] for c in state["candidates"]) == ["c1-0", "c1-1"]
    assert {c["idea"] for c in state["candidates"]} == {"one C loop per row, online max and sum"}
    coders = sorted(seen[-1].content for seen in model.seen[1:3])
    assert "This is implementation 1 of 2 of this idea" in coders[0] and "most direct" in coders[0]
    assert "This is implementation 2 of 2 of this idea" in coders[1] and "different route" in coders[1]
    assert len(model.seen) == 4 and state["usage"]["coder"]["llm_calls"] == 2


def test_token_budget_ends_the_run_cleanly(tmp_path: Path) -> None:
    costly = AIMessage(content=IDEA, usage_metadata={"input_tokens": 900, "output_tokens": 200, "total_tokens": 1100})
    state, model = run(tmp_path, [costly, code(CANDIDATES / "softmax_cpu.py")], budgets=Budgets(tokens=1000))
    assert state["stop_reason"].startswith("budget")
    assert len(model.seen) == 1  # the coder's call was never sent
    assert (tmp_path / "report.md").exists()


def test_kforge_run_through_a_local_openai_compatible_server(tmp_path: Path) -> None:
    with FakeOpenAIServer(models=("test-model",)) as server:
        for text in (IDEA, code(CANDIDATES / "softmax_cpu.py"), REVIEW):
            server.reply(text, prompt_tokens=120, completion_tokens=80)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env["KFORGE_RUNS_DIR"] = str(tmp_path)
        cmd = [sys.executable, "-m", "graphs.cli", "run", "softmax_small", "--device", "cpu", "--rounds", "1"]
        cmd += ["--ideas", "1", "--no-compile", "--model", "openai:test-model", "--base-url", server.url]
        cmd += ["--no-seed-builtin"]
        cmd += ["--temperature", "0.4", "--max-tokens-per-call", "900", "--price-in", "2", "--price-out", "4"]
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert server.pending == 0 and len(server.requests) == 3
    for body in server.requests:
        assert body["temperature"] == 0.4 and 900 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    assert "└─ c1-0" in out.stdout and "[ok/accepted]" in out.stdout
    (run_dir,) = list(tmp_path.iterdir())
    trace = subprocess.run(
        [sys.executable, "-m", "graphs.cli", "trace", run_dir.name, "--role", "coder"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "coder prompt" in trace.stdout and "class ModelNew" in trace.stdout
    # Billed at the prices given: 3 calls of 120 input and 80 output tokens at $2 and $4 per million.
    assert f"{3 * (120 * 2 + 80 * 4) / 1e6:.4f}" in (run_dir / "report.html").read_text()


def test_coder_tool_calls_reach_the_trace(tmp_path: Path) -> None:
    source = (CANDIDATES / "softmax_cpu.py").read_text()
    call = AIMessage(content="", tool_calls=[{"name": "check_candidate", "args": {"source": source}, "id": "t1"}])
    state, model = run(tmp_path, [IDEA, call, code(CANDIDATES / "softmax_cpu.py"), REVIEW])
    assert len(model.seen) == 4  # the tool result went back to the model before its final answer
    (c,) = state["candidates"]
    assert c["status"] == "ok" and c["attempts"] == 1
    tool_msgs = [m for m in state["messages"] if m["content"].startswith("check_candidate")]
    assert [m["kind"] for m in tool_msgs] == ["tool_call", "tool_result"]
    assert tool_msgs[1]["content"].startswith("check_candidate: ok") and tool_msgs[1]["candidate_id"] == "c1-0"
    assert state["usage"]["coder"]["tool_calls"] == 1 and state["usage"]["coder"]["job_s"] > 0


def test_a_candidate_in_reduced_precision_passes_the_relaxed_policy_and_its_record_says_so(tmp_path: Path) -> None:
    bf16 = code(FIXTURES / "cheats" / "precision_downgrade_bf16.py")
    state, _ = run(tmp_path, [IDEA, bf16, REVIEW])
    (c,) = state["candidates"]
    assert c["status"] == "ok" and c["verdict"] == "accepted", c["reason"]
    static, dynamic = c["reduced_precision"]
    assert static == "precision_downgrade at line 9: uses torch.bfloat16, below the problem's precision"
    assert dynamic.startswith("precision_downgrade: computed in reduced precision: ") and "bfloat16" in dynamic
    saved = json.loads((tmp_path / "candidates" / c["id"] / "result.json").read_text())
    assert saved["reduced_precision"] == c["reduced_precision"] and saved["anti_cheat"] == []


def test_every_role_is_told_the_run_s_tolerance_policy(tmp_path: Path) -> None:
    state, model = run(tmp_path, [IDEA, code(CANDIDATES / "softmax_cpu.py"), REVIEW], policy="strict")
    systems = [seen[0].content for seen in model.seen]
    assert len(systems) == 3 and all("strict tolerance policy" in s and "1e-4" in s for s in systems)
    assert not any("Lower precision" in s for s in systems)
    assert state["candidates"][0]["verdict"] == "accepted"  # the fp32 C kernel meets 1e-4
