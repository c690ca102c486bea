"""The local backend for real: a fresh worker process per job, and candidates that misbehave.

Every job here runs the real worker on the CPU twin of the softmax problem, in both launch modes:
forked from the fork server (the default) and as a new interpreter.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from sandbox.config import LocalSandboxConfig
from sandbox.local import LocalSandbox
from sandbox.protocol import EvalJob, JobResult, TimingConfig
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tools.timing import CpuTimer

HOSTILE = FIXTURES / "hostile"
QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)
SANDBOXES = {
    "prefork": LocalSandbox(LocalSandboxConfig(prefork=True)),
    "subprocess": LocalSandbox(LocalSandboxConfig(prefork=False)),
}


@pytest.fixture(params=sorted(SANDBOXES))
def sandbox(request: pytest.FixtureRequest) -> LocalSandbox:
    return SANDBOXES[request.param]


def run(
    sandbox: LocalSandbox, candidate: Path | None, *, timeout_s: float = 60, time_it: bool = False, **kw: object
) -> JobResult:
    job = EvalJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        candidate_name=candidate.name if candidate else "candidate.py",
        candidate_source=candidate.read_text() if candidate else None,
        device="cpu",
        references=["eager"],
        timing=QUICK,
        time_candidate=time_it,
        timeout_s=timeout_s,
        **kw,  # type: ignore[arg-type]
    )
    return sandbox.run(job)


def test_correct_cpu_candidate_is_ok_and_timed(sandbox: LocalSandbox) -> None:
    result = run(sandbox, CANDIDATES / "softmax_cpu.py", time_it=True)
    assert result.status == "ok", result.reason + result.details
    assert result.correctness is not None and len(result.correctness.checks) == 5
    assert all(c.passed for c in result.correctness.checks)
    assert len({c.seed for c in result.correctness.checks}) == 5  # fresh inputs for every check
    assert result.timing is not None and set(result.timing.stats) == {"eager", "candidate"}
    assert result.timing.stats["candidate"].trials >= 10
    assert result.timing.input_sets >= 2
    assert result.exit_code == 0


def test_wrong_candidate_is_incorrect(sandbox: LocalSandbox) -> None:
    result = run(sandbox, FIXTURES / "candidates" / "wrong_softmax_cpu.py")
    assert result.status == "incorrect"
    assert "outside atol=0.01" in result.reason


def test_c_compile_error_is_compile_error(sandbox: LocalSandbox) -> None:
    result = run(sandbox, FIXTURES / "candidates" / "syntax_error_cpu.py")
    assert result.status == "compile_error", result.reason
    assert "line" in result.reason


def test_nan_never_passes(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "nan_output.py")
    assert result.status == "incorrect"
    assert "NaN" in result.reason


def test_segfault_is_crashed(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "segfault.py")
    assert result.status == "crashed"
    assert "SIGSEGV" in result.reason


def test_exit_zero_is_crashed(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "exit_zero.py")
    assert result.status == "crashed"
    assert "no verdict" in result.reason


def test_host_hang_is_timeout(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "hang.py", timeout_s=3)
    assert result.status == "timeout"
    assert result.wall_s < 3 + 5 + 5  # limit + interpreter grace + slack


def test_exception_is_runtime_error(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "raises.py")
    assert result.status == "runtime_error"
    assert "ValueError: this kernel is not implemented" in result.reason
    assert "Traceback" in result.details


def test_missing_modelnew_is_runtime_error(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "no_modelnew.py")
    assert result.status == "runtime_error"
    assert "ModelNew" in result.reason


def test_fake_verdict_on_stdout_is_not_believed(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "fake_verdict.py")
    assert result.status == "crashed"
    assert '"status": "ok"' in result.stdout_tail  # it printed it; nobody listened


def test_forged_result_channel_is_rejected(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "forge_channel.py")
    assert result.status == "rejected"
    assert result.reason.startswith("verdict_forgery: ")
    assert "did not write" in result.reason or "signature" in result.reason


def test_api_keys_never_reach_the_candidate(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-value")
    result = run(sandbox, HOSTILE / "read_env.py")
    assert result.status == "ok", result.reason
    line = next(x for x in result.stdout_tail.splitlines() if x.startswith("ENV:"))
    assert "ENV: none" in line
    home = line.split("HOME:")[1].strip()
    assert home != os.environ.get("HOME") and "kforge-" in home  # a private scratch folder


def test_children_left_behind_are_killed(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "leave_child.py")
    assert result.status == "rejected" and result.reason.startswith("thread: child process"), result.reason
    pid = int(re.search(r"CHILD (\d+)", result.stdout_tail).group(1))  # type: ignore[union-attr]
    # SIGKILL lands asynchronously and zombies reaped by init linger a moment: give it 5 s to be gone.
    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + 5
    while status.exists() and "State:\tZ" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_mutating_inputs_is_incorrect(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "mutate_input.py")
    assert result.status == "rejected"
    assert result.reason.startswith("input_mutation: modified input(s) [0]")


def test_clock_patched_by_candidate_is_rejected_before_timing(sandbox: LocalSandbox) -> None:
    result = run(sandbox, HOSTILE / "patch_clock.py", time_it=True)
    assert result.status == "rejected", result.reason
    assert result.reason.startswith("timer_patch: time.perf_counter was replaced")
    assert result.timing is None


def test_a_captured_clock_ignores_a_patched_one() -> None:
    # Defence in depth under the rejection above: the timer keeps the clock it was built with.
    timer = CpuTimer()
    real = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0  # what patch_clock.py does
        ms, _ = timer.time_call(lambda: time.sleep(0.002), [])
    finally:
        time.perf_counter = real
    assert ms >= 2.0


def test_reference_only_job_times_the_baseline(sandbox: LocalSandbox) -> None:
    result = run(sandbox, None, time_it=True)
    assert result.status == "ok"
    assert result.timing is not None and set(result.timing.stats) == {"eager"}
    assert result.correctness is None


def test_scratch_folder_is_removed(sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile re-read TMPDIR
    run(sandbox, CANDIDATES / "softmax_cpu.py")
    assert not list(tmp_path.glob("kforge-*"))
