"""``langgraph.json``: ``langgraph dev`` serves the search graph on loopback and lists it over HTTP.

Skips without langgraph-cli[inmem] unless KFORGE_REQUIRE_LANGGRAPH_DEV=1 (CI sets it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from graphs.studio import build_studio_graph
from tests.conftest import ROOT

GRAPH_ID = "kernelforge"
NODES = {"baseline", "planner", "coder", "profiler", "critic", "finalize"}


def test_langgraph_json_names_the_studio_factory() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["graphs"] == {GRAPH_ID: "./graphs/studio.py:make_graph"}


def test_the_studio_factory_builds_the_search_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFORGE_RUNS_DIR", str(tmp_path))
    graph = build_studio_graph({"configurable": {"problem": "softmax_small", "device": "cpu", "thread_id": "t1"}})
    assert set(graph.get_graph().nodes) >= NODES
    assert not (tmp_path / "studio").exists()  # nothing is written until the graph runs


def _require_langgraph_dev() -> None:
    if importlib.util.find_spec("langgraph_cli") and importlib.util.find_spec("langgraph_api"):
        return
    if os.environ.get("KFORGE_REQUIRE_LANGGRAPH_DEV") == "1":
        pytest.fail(
            "KFORGE_REQUIRE_LANGGRAPH_DEV=1 but langgraph-cli[inmem] is not installed (pip install -e '.[dev]')"
        )
    pytest.skip("langgraph-cli[inmem] is not installed; KFORGE_REQUIRE_LANGGRAPH_DEV=1 makes this fail")


def _scratch_config(folder: Path) -> Path:
    """The checkout's langgraph.json with its paths made absolute, to serve from a scratch folder: the
    dev server keeps its state in ./.langgraph_api and resolves graph paths against the working folder."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    config["dependencies"] = [str((ROOT / d).resolve()) for d in config["dependencies"]]
    config["graphs"] = {k: str(ROOT / v.removeprefix("./")) for k, v in config["graphs"].items()}
    path = folder / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.load(resp)


def test_langgraph_dev_serves_the_graph_on_loopback(tmp_path: Path) -> None:
    _require_langgraph_dev()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KFORGE_RUNS_DIR": str(tmp_path / "runs"),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # no telemetry call from a test
        "LANGSMITH_TRACING": "false",
    }
    cmd = [sys.executable, "-m", "langgraph_cli", "dev", "--port", str(port), "--host", "127.0.0.1"]
    cmd += ["--no-browser", "--no-reload", "--config", str(_scratch_config(tmp_path))]
    log = (tmp_path / "langgraph-dev.log").open("wb")
    server = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "langgraph-dev.log").read_text()[-4000:]
            try:
                if _call(f"{base}/ok").get("ok"):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "langgraph dev did not answer /ok within 180 s"
            time.sleep(0.5)
        assistants = _call(f"{base}/assistants/search", {"graph_id": GRAPH_ID})
        assert [a["graph_id"] for a in assistants] == [GRAPH_ID]
        drawn = _call(f"{base}/assistants/{assistants[0]['assistant_id']}/graph")
        assert {n["id"] for n in drawn["nodes"]} >= NODES
    finally:
        if server.poll() is None:  # a server that died already has its log in the failure message
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()
