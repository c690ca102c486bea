"""The real compiled graph with the builtin offline team, on the CPU twins: no LLM anywhere.

These run real sandbox jobs (compile, correctness, timing), so they take tens of seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents import registry
from agents.base import Candidate, RoleContext
from agents.coder import check
from graphs.builder import build_graph
from graphs.config import RunConfig
from graphs.runs import RunPaths
from graphs.state import message
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS, ROOT
from tools.problem import load_problem
from tools.protocol import TimingConfig

QUICK = TimingConfig(min_trials=20, min_seconds=0.1, warmup_trials=2)


def context(tmp_path: Path, problem: str, **settings: Any) -> RoleContext:
    config = RunConfig(problem=str(PROBLEMS / f"{problem}.py"), device="cpu", timing=QUICK, **settings)
    return RoleContext(
        problem=load_problem(config.problem),
        sandbox=LocalSandbox(),
        settings=config,
        run_dir=tmp_path,
        extras={"available_bytes": 8 << 30},
    )


def run_graph(ctx: RoleContext) -> dict[str, Any]:
    graph = build_graph(ctx).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}, "recursion_limit": ctx.settings.recursion_limit}
    graph.invoke({"run_id": "t", "started_at": time.time()}, cfg)
    return dict(graph.get_state(cfg).values)


def test_builtin_team_searches_the_cpu_softmax_and_keeps_only_a_speedup_it_can_show(tmp_path: Path) -> None:
    # patience=3: every round runs even when CPU timing under load puts rounds 1 and 2 within noise of the
    # reference (the plateau stop is tested in test_checks.py); checked here: the tree search and its output.
    # No torch.compile reference: a candidate's speedup over it scales by the baseline job's compile/eager
    # ratio, taken in another job, which CI's load once skewed fivefold (compile is slower than eager on the
    # CPU twins anyway); against eager alone both times come from the same interleaved job.
    # The team's kernels run 1.03-1.09x eager here on a quiet machine, with intervals above 1.01; under CI's load the
    # intervals can all reach below it, and then the reference stands: a best is kept only when shown faster.
    state = run_graph(context(tmp_path, "softmax_small", rounds=3, ideas=2, patience=3, compile_reference=False))
    assert state["round"] == 3, state.get("stop_reason")
    assert state["stop_reason"] == "completed 3 rounds"
    candidates = state["candidates"]
    assert len(candidates) == 6
    assert all(c["verdict"] in ("accepted", "rejected") for c in candidates)
    timed = [c for c in candidates if c["verdict"] == "accepted"]
    assert timed and all(c["speed"] and len(c["speedup_interval"]) == 2 for c in timed)
    later = [c for c in candidates if c["round"] > 1]
    assert any(c["parent_id"] is not None for c in later)  # tree search: later rounds branch from a parent
    shown = [c for c in timed if c["speed"] == "faster"]
    if not shown:
        assert state.get("best_id") is None, state.get("best_id")
        assert "speedup 1.0" in (tmp_path / "best" / "README.md").read_text()
        return
    best = next(c for c in candidates if c["id"] == state["best_id"])
    assert best in shown and best["speedup_vs_best"] == max(c["speedup_vs_best"] for c in shown)
    low, high = best["speedup_interval"]
    assert 1.01 < low <= best["speedup_vs_best"] <= high
    assert (tmp_path / "best" / "model_new.py").read_text() == best["source"]
    assert "best:" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "candidates" / best["id"] / "result.json").exists()


def test_unknown_problem_returns_the_reference(tmp_path: Path) -> None:
    problem = tmp_path / "sort.py"
    problem.write_text(
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.sort(x, dim=-1).values\n\n\ndef get_inputs():\n    return [torch.randn(64, 64)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    config = RunConfig(problem=str(problem), device="cpu", timing=QUICK, compile_reference=False)
    ctx = RoleContext(load_problem(problem), LocalSandbox(), config, tmp_path, {"available_bytes": 8 << 30})
    state = run_graph(ctx)
    assert state["stop_reason"] == "no builtin idea applies to this problem"
    assert state.get("best_id") is None and not state.get("candidates")
    assert "speedup 1.0" in (tmp_path / "best" / "README.md").read_text()


class Tester:
    """An extra role: re-checks every verified candidate on more, different seeds (edge-case inputs)."""

    name = "tester"
    fan_out = False

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        updates, messages = [], []
        for c in state.get("candidates", []):
            if c.get("status") == "ok" and not c.get("tested"):
                other_seeds = dataclasses.replace(ctx, settings=ctx.settings.model_copy(update={"seed": 101}))
                ev = check(c["source"], c["id"], other_seeds)
                update = Candidate(id=c["id"])
                update.update(tested=True)  # type: ignore[typeddict-item]
                if ev.status != "ok":
                    update.update(status=ev.status, reason=f"tester: {ev.result.reason}")
                updates.append(update)
                messages.append(message("tester", "tool_result", f"{c['id']}: {ev.status}", state["round"], c["id"]))
        return {"candidates": updates, "messages": messages}


def test_a_new_role_plugs_in_through_the_registry_and_the_config(tmp_path: Path) -> None:
    registry.register("tester", lambda settings: Tester(), replace=True)
    roles = ["planner", "coder", "tester", "profiler", "critic"]
    state = run_graph(context(tmp_path, "layernorm_small", rounds=1, ideas=2, roles=roles, compile_reference=False))
    tested = [c for c in state["candidates"] if c.get("tested")]
    assert tested, state["candidates"]
    assert any(m["role"] == "tester" for m in state["messages"])
    assert state["stop_reason"] == "completed 1 rounds"


def _kforge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphs.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


def _evaluations(run_dir: Path) -> int:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return sum(1 for e in events if e.get("event") == "candidate_checked")


def test_kill_and_resume_evaluates_no_candidate_twice(tmp_path: Path) -> None:
    env = {**os.environ, "KFORGE_RUNS_DIR": str(tmp_path)}
    args = ["softmax_small", "--device", "cpu", "--rounds", "2", "--ideas", "2", "--no-compile"]

    expected = 4  # 2 rounds × 2 ideas: what the same run makes when nothing stops it

    resumed_root = tmp_path / "killed"
    env["KFORGE_RUNS_DIR"] = str(resumed_root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphs.cli", "run", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    run_dir = None
    while time.time() < deadline:
        runs = list(resumed_root.glob("*/events.jsonl")) if resumed_root.exists() else []
        if runs:
            run_dir = runs[0].parent
            events = [json.loads(x) for x in runs[0].read_text().splitlines() if x.strip()]
            # Kill once round 1's coders are done and the profiler has started.
            if any(e.get("event") == "node_start" and e.get("role") == "profiler" for e in events):
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert run_dir is not None and not (run_dir / "report.md").exists()
    done = _kforge("resume", run_dir.name, env=env)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "report.md").exists()
    assert _evaluations(run_dir) == expected
    # Its progress goes on from the saved state: round 1's two candidates are counted from the first line on
    steps = re.findall(r"^\[round (\d+)\] (\S+)\s+· (\d+) candidates", done.stdout, flags=re.MULTILINE)
    assert steps and not any(node.startswith("__") for _, node, _ in steps), done.stdout
    assert int(steps[0][0]) >= 1 and int(steps[0][2]) >= 2, done.stdout


def test_cli_run_then_trace_and_runs(tmp_path: Path) -> None:
    env = {**os.environ, "KFORGE_RUNS_DIR": str(tmp_path)}
    checking = ["--checks", "3", "--trials", "7", "--min-seconds", "0.05"]
    # Three rounds whatever the timing says: on a busy machine no round may prove faster than the last.
    rounds = ["--rounds", "3", "--ideas", "2", "--patience", "3"]
    out = _kforge("run", "layernorm_small", "--device", "cpu", *rounds, "--no-compile", *checking, env=env)
    assert out.returncode == 0, out.stderr
    assert "[round 3]" in out.stdout and "reference  eager" in out.stdout
    (run_dir,) = list(tmp_path.iterdir())
    paths = RunPaths(run_dir)
    assert paths.run_json.exists() and paths.checkpoint.exists() and paths.events.exists()
    config = json.loads(paths.run_json.read_text())["config"]
    assert (config["n_checks"], config["timing"]["min_trials"], config["timing"]["min_seconds"]) == (3, 7, 0.05)
    # $KFORGE_RUNS_DIR is where trace looks too; from elsewhere the hint names the folder
    assert f"kforge trace {run_dir.name} · " in out.stdout, out.stdout
    elsewhere = {k: v for k, v in env.items() if k != "KFORGE_RUNS_DIR"}
    assert _kforge("trace", run_dir.name, "--runs-dir", str(tmp_path), env=elsewhere).returncode == 0
    trace = _kforge("trace", run_dir.name, env=env)
    assert trace.returncode == 0 and "└─ c1-0" in trace.stdout and "planner decision" in trace.stdout
    as_json = json.loads(_kforge("trace", run_dir.name, "--json", env=env).stdout)
    assert as_json["state"]["candidates"]
    cid = as_json["state"]["candidates"][0]["id"]
    detail = _kforge("trace", run_dir.name, "--candidate", cid, env=env)
    assert "class ModelNew" in detail.stdout
    listing = _kforge("runs", env=env)
    assert run_dir.name in listing.stdout
    assert_readme_sample_is_printed_as_the_cli_prints(out.stdout)
    # A reader that stops early (`| head`) ends the command quietly, as the pipe's signal would
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed = subprocess.run(
        [sys.executable, "-m", "graphs.cli", "trace", run_dir.name, "--json"],
        cwd=ROOT,
        env=env,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    assert closed.returncode == 128 + signal.SIGPIPE and "Traceback" not in closed.stderr, closed.stderr


def _shape(line: str) -> str:
    """A line of run output with what differs between runs masked: figures, candidate ids, the interval's verdict
    and the idea's own words (the end of a candidate line); and the ★ of the best."""
    line = re.sub(r"(roofline(?: · reduced precision)?) · .*$", r"\1 · IDEA", line.replace(" ★", ""))
    line = re.sub(r"\b(faster|slower|not distinguishable)\)", "VERDICT)", line)
    return re.sub(r"c\d+-\d+|\d+(?:\.\d+)?|—", "9", line).strip()


def assert_readme_sample_is_printed_as_the_cli_prints(printed: str) -> None:
    """The README's demo sample came from a real run: every line of it must be one this version prints, shape for
    shape (the figures of one run are not another's), so a change of the output format fails here until the sample
    is taken again."""
    readme = (ROOT / "README.md").read_text()
    sample = readme.split("shows how it got there:\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    shapes = {_shape(line) for line in printed.splitlines()}
    assert sample and all(_shape(line) in shapes for line in sample), [
        line for line in sample if _shape(line) not in shapes
    ]


@pytest.mark.parametrize("bad", ["--rounds=0", "--ideas=0", "--roles=planner,nope"])
def test_bad_run_options_are_one_line_errors(tmp_path: Path, bad: str) -> None:
    out = _kforge("run", "softmax_small", "--device", "cpu", bad, env={**os.environ, "KFORGE_RUNS_DIR": str(tmp_path)})
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_an_unreachable_docker_engine_is_a_one_line_environment_error(tmp_path: Path) -> None:
    env = {**os.environ, "KFORGE_RUNS_DIR": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"}
    out = _kforge("run", "softmax_small", "--device", "cpu", "--sandbox", "docker", env=env)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "cannot reach the Docker engine" in out.stderr and "Traceback" not in out.stderr
    # Listed as what it is: a run that failed, with why; not "unfinished" as if it could go on by itself
    listing = _kforge("runs", env=env).stdout
    assert "failed: " in listing and "cannot reach the Docker engine" in listing, listing
