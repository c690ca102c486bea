"""`kforge batch`: the real command on CPU problems (interrupted, resumed, read back, carried to a machine
without their run folders by --after), problem files it cannot run, and the arithmetic of its summary
(KernelBench's fast_p, geometric means) on hand-made rows."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from graphs.batch import fast_p, geomean, merge, reason_for, summarise
from graphs.batch.problems import discover, explain, row_names
from graphs.batch.rows import best_kernel, outcome, verified
from graphs.batch.runner import run_is_busy
from graphs.cli import build_parser, sandbox_config
from graphs.runs import RunPaths
from tests.conftest import PROBLEMS, ROOT
from tools.errors import ConfigError, KernelforgeError, ProblemError

# Tiny timing and checking settings: what is tested is the batch, not the kernels' numbers.
FAST = ["--device", "cpu", "--rounds", "1", "--ideas", "1", "--checks", "2", "--trials", "10", "--min-seconds", "0.05"]
FAST += ["--no-compile"]
REAL = ["softmax_small", "layernorm_small", "sum_dim_small"]

SORT = '''"""Row sort: no builtin family applies to it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1)[0]


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return []
'''

MODEL_AND_INIT = """
class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_init_inputs():
    return []
"""

# Files a KernelBench checkout has that cannot run everywhere, and files that are simply broken.
BROKEN = {
    # level 4 imports `transformers` at the top
    "hf_model.py": "import torch\nimport torch.nn as nn\nimport kforge_absent_pkg.models\n" + MODEL_AND_INIT,
    "cuda_inputs.py": "import torch\nimport torch.nn as nn\n"
    + MODEL_AND_INIT
    + "\n\ndef get_inputs():\n    return [torch.randn(8, 8).cuda()]\n",
    "syntax_error.py": "import torch\n\ndef get_inputs(:\n    return []\n",
    "no_model.py": "import torch\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n"
    "    return []\n",
    "raises_in_inputs.py": "import torch\nimport torch.nn as nn\n"
    + MODEL_AND_INIT
    + '\n\ndef get_inputs():\n    raise RuntimeError("no data here")\n',
}


def batch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "graphs.cli", "batch", *args]


def with_sigint(cmd: list[str], action: str) -> list[str]:
    """``cmd`` started with SIGINT's action set (``SIG_DFL``: a terminal's foreground job; ``SIG_IGN``: a
    script's background job), not inherited from however pytest was started."""
    start = f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{action}); "
    start += "os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", start, *cmd]


def env(cache: Path) -> dict[str, str]:
    # A fixed commit: others may edit the shared tree between calls, and a run is reused only under its commit.
    return {**os.environ, "KFORGE_CACHE_DIR": str(cache), "KFORGE_COMMIT": "test-batch"}


def read(out: Path) -> tuple[dict[str, Any], str]:
    return json.loads((out / "batch.json").read_text()), (out / "batch.md").read_text()


def events(run_dir: Path, role: str, kind: str) -> int:
    lines = (run_dir / "events.jsonl").read_text().splitlines() if (run_dir / "events.jsonl").exists() else []
    return sum(e.get("role") == role and e.get("event") == kind for e in map(json.loads, lines))


def past_baseline(runs: Path) -> set[str]:
    """Runs whose baseline is checkpointed: the planner starts only after the baseline's step is saved."""
    return {d.name for d in runs.glob("*/") if events(d, "planner", "node_start")}


def test_batch_runs_interrupts_resumes_and_reads_back(tmp_path: Path, kforge_cache: Path) -> None:
    problems = tmp_path / "level1"  # a KernelBench-like folder: its name is the rows' group
    problems.mkdir()
    for name in REAL:
        shutil.copy(PROBLEMS / f"{name}.py", problems)
    (problems / "sort_small.py").write_text(SORT)
    for name, source in BROKEN.items():
        (problems / name).write_text(source)
    runs, out = tmp_path / "runs", tmp_path / "out"
    common = [str(problems), *FAST, "--parallel", "2", "--runs-dir", str(runs), "--out", str(out)]

    # 1. Interrupted (Ctrl-C, to the whole process group as a terminal sends it) once a baseline is saved.
    first = subprocess.Popen(
        with_sigint(batch_cmd(*common), "SIG_DFL"),
        cwd=ROOT,
        env=env(kforge_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 150
    while not past_baseline(runs) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, "the batch ended before it could be interrupted"
    os.killpg(first.pid, signal.SIGINT)
    stdout, _ = first.communicate(timeout=60)
    assert first.returncode == 130, stdout
    assert "The same command resumes" in stdout
    assert "Traceback" not in stdout, stdout  # the stopped searches end quietly; the table says where they got
    record, _ = read(out)
    interrupted = {r["name"] for r in record["rows"] if r["status"] == "unfinished"}
    assert interrupted and interrupted <= {"layernorm_small", "softmax_small"}, record["rows"]
    saved = past_baseline(runs)
    # What the interrupt caught besides: a run finished just before it, or one created but not yet listed.
    finished = {r["name"] for r in record["rows"] if r["status"] == "done"}
    created = {d.name.split("-", 2)[2].rsplit("-", 1)[0] for d in runs.iterdir() if d.is_dir()}

    # 2. The same command again: the interrupted runs are resumed, the rest searched.
    proc = subprocess.run(
        batch_cmd(*common), cwd=ROOT, env=env(kforge_cache), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record, md = read(out)
    rows = {r["name"]: r for r in record["rows"]}
    assert list(rows) == sorted(rows)  # the table keeps the files' order

    skipped = {n: r["reason"] for n, r in rows.items() if r["status"] == "skipped"}
    assert skipped["hf_model"] == "needs the `kforge_absent_pkg` package"
    assert skipped["syntax_error"].startswith("syntax error at line 3")
    assert skipped["no_model"].startswith("defines no `Model`")
    assert skipped["raises_in_inputs"] == "get_inputs() raised RuntimeError: no data here"
    if not torch.cuda.is_available():
        assert skipped["cuda_inputs"].startswith("needs a CUDA GPU")
    assert all("\n" not in reason and str(problems) not in reason for reason in skipped.values())

    done = {n: r for n, r in rows.items() if r["status"] == "done"}
    assert set(done) == {*REAL, "sort_small"}
    for name in interrupted:
        assert done[name]["this_session"] == "resumed"
    assert saved <= {done[n]["run_id"] for n in interrupted}
    for run_id in saved:  # resumed from its checkpoint: the baseline is not timed again
        assert events(runs / run_id, "baseline", "node_start") == 1
    for n in set(done) - interrupted:
        want = "reused" if n in finished else "resumed" if n in created else "new"
        assert done[n]["this_session"] == want, (n, done[n]["this_session"])
    for r in done.values():
        assert r["eager_ms"] > 0 and r["compile_ms"] is None and r["search_wall_s"] > 0
        assert r["tokens"] == 0 and r["dollars"] == 0.0  # the builtin team calls no model
        assert r["outcome"] in ("faster", "correct, not faster", "no correct kernel")
        if r["outcome"] == "faster":
            assert r["kernel_correct"] and r["speedup_vs_best"] > 1.0 and r["verified"] is True
        else:
            assert r["reference_stands"] and r["speedup_vs_best"] == 1.0
    sort = done["sort_small"]
    assert sort["outcome"] == "no correct kernel" and sort["candidates"] == 0 and not sort["kernel_correct"]
    assert sort["stop_reason"] == "no builtin idea applies to this problem"

    # The summary is the rows' arithmetic: every one of the 9 files was attempted.
    s = record["summary"]
    assert (s["problems"], s["attempted"], s["done"], s["failed"], s["pending"]) == (9, 9, 4, 5, 0)
    correct = [r for r in done.values() if r["kernel_correct"]]
    assert s["correctness_rate"] == s["fast_p_vs_eager"]["0"] == pytest.approx(len(correct) / 9)
    faster = [r for r in correct if r["kernel_speedup_vs_eager"] > 1]
    assert s["fast_p_vs_eager"]["1"] == pytest.approx(len(faster) / 9)
    wins = [r["speedup_vs_best"] for r in done.values() if r["outcome"] == "faster"]
    assert s["geomean_vs_best"] == pytest.approx(math.prod(wins) ** (1 / 9))  # 5 failed + the rest count 1.0
    assert s["geomean_vs_compile"] is None  # --no-compile: not measured
    assert s["tokens"] == 0 and s["search_wall_s"] > 0 and record["wall_s"] > 0
    assert record["command"].startswith("kforge batch ") and "--parallel 2" in record["command"]
    assert record["commit"] == "test-batch" and record["model"] == "builtin" and record["device"] == "cpu"

    # The markdown: header facts, one line per file, the summary's metrics.
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 10 and all(line.count("|") == 14 for line in table)
    assert "| hf_model | skipped: needs the `kforge_absent_pkg` package |" in md
    assert any(line.startswith("| sort_small | no correct kernel |") for line in table)
    assert "Commit: `test-batch`" in md and record["command"] in md and "fast_1.5" in md
    assert f"**{s['geomean_vs_best']:.3f}× vs the faster of eager and torch.compile**" in md

    # 3. Again with the time budget spent and one more problem: every finished run is read back, nothing is
    # searched, and the new problem waits for the next call.
    before = sorted(p.name for p in runs.iterdir() if p.is_dir())
    proc = subprocess.run(
        batch_cmd(str(PROBLEMS / "rmsnorm_small.py"), *common, "--budget-s", "0"),
        cwd=ROOT,
        env=env(kforge_cache),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again, _ = read(out)
    status = {r["name"]: (r["status"], r.get("this_session")) for r in again["rows"]}
    assert next(iter(status)) == "rmsnorm_small"  # files keep the order they were named in
    assert {n: status[n] for n in done} == {n: ("done", "reused") for n in done}
    assert status["rmsnorm_small"] == ("pending", None)
    assert "baseline:" not in proc.stdout and "1 problem(s) left" in proc.stdout
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == before
    assert {k: again["summary"][k] for k in ("done", "pending", "attempted")} == {
        "done": 4,
        "pending": 1,
        "attempted": 9,
    }
    assert again["summary"]["geomean_vs_best"] == pytest.approx(s["geomean_vs_best"])
    # Two folders, two groups: the repository's problems/ (rmsnorm, not run yet) and level1 (all attempted).
    assert {g: (v["problems"], v["attempted"]) for g, v in again["groups"].items()} == {
        "level1": (9, 9),
        "problems": (1, 0),
    }

    # 4. The next call on a fresh machine: no run folders, only the last call's batch.json (--after). Its
    # finished rows are taken, not searched again; the problem left (named first, so started inside the
    # second's budget) is searched; the merged slices make one table with every problem once.
    runs2, out2 = tmp_path / "runs2", tmp_path / "out2"
    proc = subprocess.run(
        batch_cmd(
            str(PROBLEMS / "rmsnorm_small.py"),
            *common[:-4],  # without --runs-dir and --out
            *["--runs-dir", str(runs2), "--out", str(out2), "--budget-s", "1", "--after", str(out / "batch.json")],
        ),
        cwd=ROOT,
        env=env(kforge_cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    second, _ = read(out2)
    status = {r["name"]: (r["status"], r.get("this_session")) for r in second["rows"]}
    assert status["rmsnorm_small"] == ("done", "new")
    assert {n: status[n] for n in done} == {n: ("done", "taken") for n in done}
    assert [d.name.split("-", 2)[2].rsplit("-", 1)[0] for d in runs2.glob("*/")] == ["rmsnorm_small"]
    assert "[rmsnorm_small] baseline:" in proc.stdout and proc.stdout.count("baseline:") == 1
    taken = {r["name"]: r for r in second["rows"]}
    assert all(taken[n]["run_id"] == rows[n]["run_id"] for n in done)  # the first machine's runs stand
    merged = merge([out / "batch.json", out2 / "batch.json"], tmp_path / "all", "batch")
    md = (tmp_path / "all" / "batch.md").read_text()
    names = [r["name"] for r in merged["rows"]]
    assert sorted(names) == sorted({*rows, "rmsnorm_small"}) and len(names) == len(set(names)) == 10
    assert merged["summary"]["pending"] == 0 and merged["summary"]["done"] == 5
    assert merged["groups"]["level1"] == again["groups"]["level1"] and merged["groups"]["problems"]["done"] == 1
    assert "| | level1 | problems | all |" in md


# ------------------------------------------------------------------------------------ the metrics


def kernel_row(vs_eager: float, vs_best: float, **extra: Any) -> dict[str, Any]:
    row = {"status": "done", "reference_stands": False, "verified": True, "kernel_correct": True}
    row |= {"speedup_vs_eager": vs_eager, "speedup_vs_compile": vs_best, "speedup_vs_best": vs_best}
    row |= {"kernel_speedup_vs_eager": vs_eager, "kernel_speedup_vs_best": vs_best}
    return row | extra


def reference_row(kernel: float | None = None) -> dict[str, Any]:
    """The reference stands; ``kernel``: a correct kernel was found, this much faster than eager (< 1)."""
    row = {"status": "done", "reference_stands": True, "verified": True, "kernel_correct": kernel is not None}
    row |= {"speedup_vs_eager": 1.0, "speedup_vs_compile": 1.0, "speedup_vs_best": 1.0}
    return row | {"kernel_speedup_vs_eager": kernel, "kernel_speedup_vs_best": kernel}


def test_a_search_stops_when_its_batch_dies_even_if_the_batch_ignored_ctrl_c(
    tmp_path: Path, kforge_cache: Path
) -> None:
    """A batch started as a script's background job inherits SIGINT ignored. Its searches must still take
    SIGINT, the signal their watch on the batch sends them: a killed batch leaves no search running."""
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(PROBLEMS / "softmax_small.py", problems)
    runs = tmp_path / "runs"
    # Timings of a second or more: the search is still going when the batch is killed and its watch notices.
    slow = [*FAST, "--rounds", "2", "--ideas", "2", "--min-seconds", "1"]
    cmd = batch_cmd(str(problems), *slow, "--runs-dir", str(runs), "--out", str(tmp_path / "out"))
    batch = subprocess.Popen(
        with_sigint(cmd, "SIG_IGN"),
        cwd=ROOT,
        env=env(kforge_cache),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 150
    while not past_baseline(runs) and batch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert batch.poll() is None, "the batch ended before it could be killed"
    batch.kill()  # the batch alone, as the OOM killer would: its search is orphaned
    batch.wait()

    (run,) = runs.glob("*/")
    deadline = time.monotonic() + 60
    while run_is_busy(RunPaths(run)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run_is_busy(RunPaths(run)), "the orphaned search is still running"
    logged = [json.loads(line)["event"] for line in (run / "events.jsonl").read_text().splitlines()]
    assert "batch_parent_gone" in logged
    assert events(run, "finalize", "node_start") == 0, "the search ran on to its end"


def test_fast_p_is_kernelbench_s_correct_and_faster_than_p_over_all_attempted() -> None:
    rows = [
        kernel_row(3.0, 2.5),  # correct, 3x eager, 2.5x the faster reference
        kernel_row(1.2, 1.1),
        reference_row(kernel=0.8),  # a correct kernel, slower than eager
        reference_row(),  # no correct kernel
        kernel_row(9.0, 9.0, verified=False, kernel_correct=False),  # failed its fresh re-check
        {"status": "skipped", "reason": "needs the `transformers` package"},
        {"status": "error", "reason": "RuntimeError: boom"},
        {"status": "reference failed", "reason": "needs a CUDA GPU"},
        {"status": "pending"},  # not attempted: not in the denominator
    ]
    assert fast_p(rows, 0) == pytest.approx(3 / 8)  # fast_0: the correctness rate
    assert fast_p(rows, 1) == pytest.approx(2 / 8)
    assert fast_p(rows, 1.5) == pytest.approx(1 / 8)
    assert fast_p(rows, 2) == pytest.approx(1 / 8)
    assert fast_p(rows, 2, "kernel_speedup_vs_best") == pytest.approx(1 / 8)
    assert fast_p(rows, 3, "kernel_speedup_vs_eager") == 0.0  # "more than p": 3.0 is not > 3
    assert fast_p([{"status": "pending"}], 0) is None

    s = summarise(rows)
    assert (s["problems"], s["attempted"], s["done"], s["failed"], s["pending"]) == (9, 8, 5, 3, 1)
    assert s["correctness_rate"] == s["fast_p_vs_eager"]["0"] == pytest.approx(3 / 8)
    assert s["fast_p_vs_eager"] == pytest.approx({"0": 3 / 8, "1": 2 / 8, "1.5": 1 / 8, "2": 1 / 8})
    assert s["fast_p_vs_best"] == pytest.approx({"0": 3 / 8, "1": 2 / 8, "1.5": 1 / 8, "2": 1 / 8})
    # Geometric means over the 8 attempted: the two real wins, everything else (a standing reference, a
    # wrong kernel's 9x, a failure) 1.0.
    assert s["geomean_vs_eager"] == pytest.approx((3.0 * 1.2) ** (1 / 8))
    assert s["geomean_vs_best"] == pytest.approx((2.5 * 1.1) ** (1 / 8))
    assert s["results_verified_rate"] == pytest.approx(4 / 5)


def test_geometric_means_count_failures_and_slowdowns_as_one() -> None:
    slower = kernel_row(0.5, 0.5)  # a selected result slower than the reference stands for the reference
    assert geomean([kernel_row(4.0, 4.0), slower], "speedup_vs_best") == pytest.approx(2.0)
    assert geomean([kernel_row(4.0, 4.0), {"status": "error"}], "speedup_vs_best") == pytest.approx(2.0)
    assert geomean([kernel_row(4.0, 4.0), {"status": "pending"}], "speedup_vs_best") == pytest.approx(4.0)
    # Not measured at all (no torch.compile reference): no mean, rather than a mean of failures.
    no_compile = {**kernel_row(4.0, 4.0), "speedup_vs_compile": None}
    assert geomean([no_compile, {"status": "error"}], "speedup_vs_compile") is None
    assert geomean([], "speedup_vs_best") is None


def test_a_row_s_verdict_and_its_best_correct_kernel() -> None:
    accepted = {"passed": 5, "checks": 5}
    selected = {"reference_stands": False, "verdict": "accepted", "run_checks": accepted, "best_id": "c1-0"}
    assert verified(selected | {"fresh_check": None}) is None  # the batch re-checks, and has not yet
    assert verified(selected | {"fresh_check": None}, fresh=False) is True
    assert verified(selected | {"fresh_check": {"accepted": False}}) is False
    assert verified(selected | {"verdict": "rejected"}, fresh=False) is False
    assert verified({"reference_stands": True}) is True

    candidates = [
        {"id": "c1-0", "verdict": "accepted", "speedup_vs_eager": 3.0, "speedup_vs_best": 2.0},
        {"id": "c1-1", "verdict": "accepted", "speedup_vs_eager": 1.5, "speedup_vs_best": 1.0, "template": "t"},
        {"id": "c1-2", "verdict": "rejected", "speedup_vs_eager": 9.0, "speedup_vs_best": 9.0},
    ]
    assert best_kernel({"best_id": "c1-0", "verified": True}, candidates)["kernel_id"] == "c1-0"
    # The selected kernel failed its re-check: the next correct one is the problem's kernel.
    wrong = best_kernel({"best_id": "c1-0", "verified": False}, candidates)
    assert (wrong["kernel_id"], wrong["kernel_template"], wrong["kernel_speedup_vs_eager"]) == ("c1-1", "t", 1.5)
    assert best_kernel({}, candidates[2:]) == {
        "kernel_correct": False,
        "kernel_id": None,
        "kernel_template": None,
        "kernel_speedup_vs_eager": None,
        "kernel_speedup_vs_best": None,
    }
    assert outcome({"reference_stands": True, "kernel_correct": True}) == "correct, not faster"
    assert outcome({"reference_stands": False, "verified": False}) == "incorrect"


def test_reasons_say_what_is_missing() -> None:
    try:
        import kforge_absent_pkg  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError as missing:
        wrapped = ProblemError("/x/p.py: importing it raised ModuleNotFoundError")
        wrapped.__cause__ = missing
        assert reason_for(wrapped, "cpu") == "needs the `kforge_absent_pkg` package"
    assert explain("RuntimeError: No module named 'transformers.models'", "cuda") == "needs the `transformers` package"
    assert explain("AssertionError: Torch not compiled with CUDA enabled", "cpu").startswith("needs a CUDA GPU (")
    assert explain("CUDA error: out of memory", "cuda") == "CUDA error: out of memory"  # on a GPU: a real error
    assert reason_for(ProblemError("/x/p.py: defines no `Model`"), "cpu", Path("/x/p.py")) == "defines no `Model`"
    assert reason_for(ValueError("bad\nsecond line"), "cpu") == "ValueError: bad"


def test_discovery_takes_files_folders_and_globs_and_names_rows_apart(tmp_path: Path) -> None:
    for level in ("level1", "level2"):
        (tmp_path / level).mkdir()
        (tmp_path / level / "1_Conv.py").write_text("")
        (tmp_path / level / f"2_{level}_only.py").write_text("")
        (tmp_path / level / "__init__.py").write_text("")
    found = discover([str(tmp_path / "level*"), str(tmp_path / "level1" / "1_Conv.py")], [])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "level1/1_Conv.py",
        "level1/2_level1_only.py",
        "level2/1_Conv.py",
        "level2/2_level2_only.py",
    ]
    assert sorted(row_names(found).values()) == ["2_level1_only", "2_level2_only", "level1/1_Conv", "level2/1_Conv"]
    assert len(discover([str(tmp_path / "level2")], ["only"])) == 1
    with pytest.raises(KernelforgeError, match="no such problem file"):
        discover([str(tmp_path / "nothing*")], [])


def test_every_command_that_runs_jobs_offers_the_same_sandbox_options() -> None:
    from sandbox.config import DockerSandboxConfig, LocalSandboxConfig, RaySandboxConfig
    from tests.test_suite import _load_script

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))

    def options(p: argparse.ArgumentParser) -> dict[str, Any]:
        return {a.dest: (a.choices, a.default) for a in p._actions if a.dest in ("sandbox", "ray_address", "gpus")}

    offered = [options(sub.choices[name]) for name in ("eval", "run", "batch")]
    offered.append(options(_load_script().build_parser()))  # bench/suite.py
    assert len(offered[0]) == 3 and all(o == offered[0] for o in offered), offered
    args = parser.parse_args(["batch", "problems", "--sandbox", "docker", "--parallel", "3", "--gpus", "0, 1"])
    assert (args.parallel, args.func.__name__) == (3, "cmd_batch")
    assert sandbox_config(args) == DockerSandboxConfig(gpus=["0", "1"])
    assert sandbox_config(parser.parse_args(["run", "p"])) == LocalSandboxConfig()
    ray = parser.parse_args(["run", "p", "--sandbox", "ray", "--ray-address", "h:1"])
    assert sandbox_config(ray) == RaySandboxConfig(address="h:1")
    for bad, message in (
        (["--sandbox", "ray", "--gpus", "0"], "--gpus is for the local and docker backends"),
        (["--gpus", "0,,1"], "give GPU indices or UUIDs"),
        (["--ray-address", "h:1"], "--ray-address needs --sandbox ray"),
    ):
        with pytest.raises(ConfigError, match=message):
            sandbox_config(parser.parse_args(["run", "p", *bad]))


def test_slices_merge_into_one_batch_table(tmp_path: Path) -> None:
    done = kernel_row(2.0, 2.0, name="a", outcome="faster", eager_ms=1.0, compile_ms=None, best_id="c1-0")
    done |= {"candidates": 1, "kernel_id": "c1-0"}
    base = {"date": "2026-12-01", "commit": "abc", "device": "cpu", "model": "builtin", "wall_s": 5.0}
    slices = [
        {**base, "command": "kforge batch --only a", "rows": [done, {"name": "b", "status": "pending"}]},
        {**base, "command": "kforge batch --only b", "rows": [{"name": "b", "status": "skipped", "reason": "x"}]},
    ]
    files = []
    for i, record in enumerate(slices):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(record))
    merged = merge(files, tmp_path / "out", "batch")
    assert [(r["name"], r["status"]) for r in merged["rows"]] == [("a", "done"), ("b", "skipped")]
    assert merged["summary"]["attempted"] == 2 and merged["summary"]["geomean_vs_best"] == pytest.approx(math.sqrt(2))
    assert merged["wall_s"] == 10.0 and merged["command"].splitlines() == [r["command"] for r in slices]
    assert "| b | skipped: x |" in (tmp_path / "out" / "batch.md").read_text()
    files[1].write_text(json.dumps({**slices[1], "commit": "other"}))
    with pytest.raises(KernelforgeError, match="differ in commit"):
        merge(files, tmp_path / "out", "batch")


KERNELBENCH = os.environ.get("KERNELBENCH_DIR")


@pytest.mark.skipif(not KERNELBENCH, reason="set $KERNELBENCH_DIR to a KernelBench checkout to load its levels 1-4")
def test_every_kernelbench_file_of_levels_1_to_4_gets_a_row(tmp_path: Path, kforge_cache: Path) -> None:
    """Loaded unmodified, with no search (--budget-s 0): each file is pending (it would run here) or
    skipped with a one-line reason; the batch itself never crashes."""
    root = Path(KERNELBENCH or "")
    levels = [d for n in range(1, 5) for d in (root / f"level{n}", root / "KernelBench" / f"level{n}") if d.is_dir()]
    assert levels, f"{root}: no level1..level4 folders (in it or in its KernelBench/)"
    files = [p for d in levels for p in d.glob("*.py") if not p.name.startswith("_")]
    out = tmp_path / "out"
    proc = subprocess.run(
        batch_cmd(
            *map(str, levels), "--device", "cpu", "--budget-s", "0", "--runs-dir", str(tmp_path), "--out", str(out)
        ),
        cwd=ROOT,
        env=env(kforge_cache),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record, _ = read(out)
    assert len(record["rows"]) == len(files)
    for row in record["rows"]:
        assert row["status"] in ("pending", "skipped"), row
        if row["status"] == "skipped":
            assert row["reason"] and "\n" not in row["reason"], row


def test_a_batch_whose_every_problem_failed_exits_1(tmp_path: Path, kforge_cache: Path) -> None:
    problems = tmp_path / "broken"
    problems.mkdir()
    for name, source in BROKEN.items():
        (problems / name).write_text(source)
    out = tmp_path / "out"
    cmd = batch_cmd(str(problems), *FAST, "--runs-dir", str(tmp_path / "runs"), "--out", str(out))
    proc = subprocess.run(cmd, cwd=ROOT, env=env(kforge_cache), capture_output=True, text=True, timeout=600)
    record, _ = read(out)
    assert record["summary"]["failed"] == record["summary"]["problems"] == len(BROKEN), record["summary"]
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no data here" in proc.stdout  # each problem's reason on the console, not only in batch.md
