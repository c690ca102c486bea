"""API keys: read once, handed to the model client explicitly, then gone from kforge's environment (its
``os.environ``, what its children inherit, and its ``/proc/<pid>/environ``); never in a verdict, a log or
a report.

The model is replaced by the fake OpenAI-compatible server, which here answers 401 to any request
without the test's key, as OpenAI does; everything else is real: the CLI, the LangGraph run, the
client, the local sandbox and the candidates in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import structlog

from agents.llm import ChatSession
from agents.models import make_chat_model, parse_model
from graphs.logs import configure_logging
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS, ROOT
from tests.fake_openai_server import FakeOpenAIServer
from tools import keys

KEY = "sk-kforge-test-" + "0123456789abcdef" * 2
OTHER_KEY = "AIza-kforge-test-" + "fedcba9876543210" * 2
MARKER = "KFORGE_TEST_MARKER=visible"  # not a key: proves a reader of an environment saw it
IDEA = '```json\n[{"text": "one C loop per row", "expected_gain": "2x", "parent_id": null}]\n```'
REVIEW = '```json\n{"feedback": "keep going", "stop": false, "reasons": {}}\n```'
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def code(path: Path) -> str:
    return f"Here it is.\n\n```python\n{path.read_text()}```\n"


def child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without its keys and proxies, plus ``extra``: what a user's shell would pass."""
    env = {k: v for k, v in os.environ.items() if k not in keys.KEY_VARS and k not in PROXIES}
    env.update(NO_PROXY="127.0.0.1,localhost", KFORGE_RUNS_DIR=str(tmp_path), KFORGE_COMMIT="test-keys", **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env[MARKER.split("=")[0]] = MARKER.split("=")[1]
    return env


def everything_written(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# ------------------------------------------------------------------------------- the environment


def test_taken_keys_leave_os_environ_the_children_and_proc_environ(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, os, subprocess, sys
        from tools import keys

        def own():
            with open("/proc/self/environ", "rb") as f:
                return f.read().decode(errors="replace")

        before = own()
        held = keys.take_from_environment()
        read_parent = "import os; print(open(f'/proc/{os.getppid()}/environ', 'rb').read().decode(errors='replace'))"
        child = subprocess.run([sys.executable, "-c", read_parent], capture_output=True, text=True).stdout
        inherited = subprocess.run(["env"], capture_output=True, text=True).stdout
        print(json.dumps({
            "before": before, "held": held, "after": own(), "parent_seen_by_child": child,
            "inherited": inherited, "left": [k for k in keys.KEY_VARS if k in os.environ],
        }))
        """
    )
    env = child_env(tmp_path, OPENAI_API_KEY=KEY, GEMINI_API_KEY=OTHER_KEY)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert KEY in seen["before"] and OTHER_KEY in seen["before"]  # the exec-time block did hold them
    assert seen["held"] == {"OPENAI_API_KEY": KEY, "GEMINI_API_KEY": OTHER_KEY}
    assert seen["left"] == []
    for where in ("after", "parent_seen_by_child", "inherited"):
        assert KEY not in seen[where] and OTHER_KEY not in seen[where], where
        assert MARKER in seen[where], where  # the rest of the environment is untouched, and was read


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    for var in PROXIES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAIServer(api_key=KEY) as fake:
        yield fake


def test_every_client_of_a_process_authenticates_after_the_key_left_the_environment(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    spec = parse_model("openai:test-model", base_url=server.url)
    first = ChatSession(make_chat_model(spec, timeout_s=5), sleep=lambda s: None, max_attempts=1)
    assert "OPENAI_API_KEY" not in os.environ
    # A second run in the same process (a test, LangGraph Studio) builds its client after the key left.
    second = ChatSession(make_chat_model(spec, timeout_s=5), sleep=lambda s: None, max_attempts=1)
    server.reply("one").reply("two")
    assert first.ask("critic", "s", "u", parse=str)[0] == "one"
    assert second.ask("critic", "s", "u", parse=str)[0] == "two"
    assert [h["authorization"] for h in server.headers] == [f"Bearer {KEY}"] * 2


def test_the_fake_server_refuses_a_client_without_the_key(server: FakeOpenAIServer) -> None:
    # The check the tests above rely on: without the key, no answer comes back (and none is used up).
    from agents.llm import LLMError

    model = make_chat_model(parse_model("openai:test-model", base_url=server.url), timeout_s=5)
    server.reply("never")
    with pytest.raises(LLMError, match="Incorrect API key"):
        ChatSession(model, sleep=lambda s: None, max_attempts=1).ask("critic", "s", "u", parse=str)
    assert server.pending == 1


# --------------------------------------------------------------------------------------- the logs


def test_a_held_key_is_redacted_from_every_log_line_and_traceback(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    keys.adopt({"OPENAI_API_KEY": KEY})
    configure_logging(False, events)
    try:
        log = structlog.get_logger("test")
        log.warning("quoted", text=f"the key is {KEY}", nested={"list": [KEY, ("x", KEY)]})
        try:
            raise ValueError(f"bad key {KEY}")
        except ValueError:
            log.exception("failed")
    finally:
        configure_logging(False, None)
    written = events.read_text()
    assert KEY not in written
    lines = [json.loads(line) for line in written.splitlines()]
    assert lines[0]["text"] == "the key is [redacted]"
    assert lines[0]["nested"] == {"list": ["[redacted]", ["x", "[redacted]"]]}
    assert "ValueError: bad key [redacted]" in lines[1]["exception"]


# ---------------------------------------------------------------------------------- a whole run


def kforge(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "graphs.cli", *args]
    env = child_env(tmp_path, **extra)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


LLM_RUN = ("--device", "cpu", "--rounds", "1", "--ideas", "1", "--repairs", "0", "--no-compile", "--no-seed-builtin")


def test_a_run_authenticates_and_its_candidate_never_reads_the_key(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with FakeOpenAIServer(api_key=KEY) as server:
        for text in (IDEA, code(FIXTURES / "hostile" / "read_parent_environ.py"), REVIEW):
            server.reply(text)
        model = ("--model", "openai:test-model", "--base-url", server.url)
        out = kforge(runs, "run", "softmax_small", *LLM_RUN, *model, OPENAI_API_KEY=KEY)
        assert out.returncode == 0, out.stdout + out.stderr
        assert server.pending == 0 and [h["authorization"] for h in server.headers] == [f"Bearer {KEY}"] * 3
    (run_dir,) = runs.iterdir()
    (candidate,) = (run_dir / "candidates").iterdir()
    reason = json.loads((candidate / "result.json").read_text())["result"]["reason"]
    assert "ENVIRON " in reason, reason
    if re.search(r"ENVIRON \d: ", reason):
        # Contained (sandbox.contain): kforge's processes are out of sight in the job's PID namespace. The candidate
        # is the runner there, whose parent, the judge (process 1), keeps its environment to itself (sandbox.runner);
        # or process 1 itself, where it runs in the worker.
        assert re.search(r"ENVIRON (1: -|\d: - \| 1: PermissionError) \| own: -$", reason), reason
    else:
        # The candidate walked up to kforge's own process and read its environment there (the marker) ...
        assert MARKER in reason, reason
    # ... and found no key in it, or in its own: nothing had to be redacted.
    assert "API_KEY" not in reason and keys.REDACTED not in reason, reason
    assert KEY.encode() not in everything_written(run_dir) + (out.stdout + out.stderr).encode()

    # A report written again with a "key" it does contain: the key's value is replaced.
    report = kforge(runs, "report", run_dir.name, OPENAI_API_KEY="softmax_small")
    assert report.returncode == 0, report.stdout + report.stderr
    html = (run_dir / "report.html").read_text()
    assert "softmax_small" not in html and keys.REDACTED in html


def test_every_problem_process_of_a_batch_gets_the_key(tmp_path: Path) -> None:
    problems = tmp_path / "problems"
    problems.mkdir()
    source = (PROBLEMS / "softmax_small.py").read_text()
    # Two problems the batch cannot take for one (it reads back a finished run of the same source).
    (problems / "first.py").write_text(source)
    (problems / "second.py").write_text(source + "\n# the second problem\n")
    runs, out_dir = tmp_path / "runs", tmp_path / "out"
    with FakeOpenAIServer(api_key=KEY) as server:
        for _ in range(2):
            for text in (IDEA, code(CANDIDATES / "softmax_cpu.py"), REVIEW):
                server.reply(text)
        model = ("--model", "openai:test-model", "--base-url", server.url)
        where = ("--runs-dir", str(runs), "--out", str(out_dir), "--parallel", "1")
        out = kforge(runs, "batch", str(problems), *LLM_RUN, *model, *where, OPENAI_API_KEY=KEY)
        assert out.returncode == 0, out.stdout + out.stderr
        assert server.pending == 0 and [h["authorization"] for h in server.headers] == [f"Bearer {KEY}"] * 6
    rows = json.loads((out_dir / "batch.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["done", "done"], rows
    assert KEY.encode() not in everything_written(tmp_path) + (out.stdout + out.stderr).encode()
