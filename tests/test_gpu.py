"""The evaluation core on a real GPU: the three research problems at full size (``gpu`` marker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.config import LocalSandboxConfig
from sandbox.local import LocalSandbox
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tools.ncu import ProfileReport
from tools.protocol import CeilingsJob, EvalJob, JobResult, ProfileJob, TimingConfig

pytestmark = pytest.mark.gpu
QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)
SANDBOX = LocalSandbox()  # one fork server for the module
OPS = {"matmul": "matmul_4096", "softmax": "softmax_4096x65536", "layernorm": "layernorm_16x64x256x256"}


def run(problem: str, candidate: Path, sandbox: LocalSandbox = SANDBOX, **kw: object) -> JobResult:
    job = EvalJob(
        problem_name=f"{problem}.py",
        problem_source=(PROBLEMS / f"{problem}.py").read_text(),
        candidate_name=candidate.name,
        candidate_source=candidate.read_text(),
        device="cuda",
        references=["eager"],
        timing=QUICK,
        timeout_s=300,
        **kw,  # type: ignore[arg-type]
    )
    return sandbox.run(job)


@pytest.mark.parametrize("op", sorted(OPS))
def test_reference_cuda_candidate_is_correct(op: str) -> None:
    result = run(OPS[op], CANDIDATES / f"{op}_cuda.py")
    assert result.status == "ok", result.reason + result.details
    assert result.compile and all(r.ok and r.target == "nvrtc" for r in result.compile)
    assert result.timing is not None and result.timing.method == "cuda_events"
    assert result.timing.stats["candidate"].median_ms > 0
    assert result.environment["arch"] == "sm_90"
    facts = ("sms", "threads_per_sm", "regs_per_sm", "smem_per_block_bytes", "smem_per_sm_bytes", "l2_bytes")
    assert all(int(result.environment[k]) > 0 for k in facts), result.environment  # the hardware sheet's


@pytest.mark.parametrize("op", sorted(OPS))
def test_wrong_cuda_candidate_is_incorrect(op: str) -> None:
    result = run(OPS[op], FIXTURES / "candidates" / f"wrong_{op}_cuda.py", time_candidate=False)
    assert result.status == "incorrect", result.reason


def test_a_new_interpreter_per_job_gives_the_same_verdict() -> None:
    plain = LocalSandbox(LocalSandboxConfig(prefork=False))
    result = run("softmax_4096x65536", CANDIDATES / "softmax_cuda.py", sandbox=plain)
    assert result.status == "ok", result.reason + result.details


def test_strict_policy_holds_the_fp32_matmul_to_1e4() -> None:
    result = run("matmul_4096", CANDIDATES / "matmul_cuda.py", policy="strict", time_candidate=False)
    assert result.status == "ok", result.reason
    assert result.correctness is not None and result.correctness.atol == 1e-4


def test_cuda_compile_error_points_at_the_candidate_line() -> None:
    path = FIXTURES / "candidates" / "syntax_error_cuda.py"
    marked = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "COMPILE ERROR ON THIS LINE" in line)
    result = run("softmax_4096x65536", path)
    assert result.status == "compile_error"
    assert f"line {marked}" in result.reason


def test_illegal_memory_access_is_a_status_not_a_crash_of_the_caller() -> None:
    result = run("softmax_4096x65536", FIXTURES / "hostile" / "cuda_illegal_access.py")
    assert result.status in ("runtime_error", "crashed")
    assert "illegal" in (result.reason + result.details + result.stderr_tail).lower()


def test_cuda_ceilings_are_plausible_for_a_datacenter_gpu() -> None:
    result = SANDBOX.run(CeilingsJob(device="cuda"))
    assert result.status == "ok" and result.ceilings is not None
    c = result.ceilings
    assert c.copy_bytes_per_s > 1e12
    assert c.tf32_flops is not None and c.tf32_flops > c.fp32_flops


def test_ncu_profiles_one_call_of_the_candidate_and_of_eager_kernel_by_kernel() -> None:
    job = ProfileJob(
        problem_name="softmax_4096x65536.py",
        problem_source=(PROBLEMS / "softmax_4096x65536.py").read_text(),
        candidate_name="softmax_cuda.py",
        candidate_source=(CANDIDATES / "softmax_cuda.py").read_text(),
        contenders=["eager", "candidate"],
        timeout_s=600,
    )
    result = SANDBOX.run(job)
    assert result.status == "ok" and result.profile is not None, result.reason + result.details
    tensor = 4096 * 65536 * 4  # read once and written once: the least any softmax moves
    # One launch of the candidate's one kernel: warm-up calls and NVRTC's work stay out of the profile.
    (kernel,) = result.profile.contenders["candidate"].kernels
    assert kernel.name.startswith("softmax_rows") and (kernel.grid, kernel.block) == (4096, 512)
    assert kernel.duration_ns and 0.3e6 < kernel.duration_ns < 5e6
    for name, profile in result.profile.contenders.items():
        assert profile.kernels and all(k.duration_ns for k in profile.kernels), name
        # At least one read and one write; each pass over a row that L2 no longer holds reads it again
        # (the candidate makes two passes, eager up to three).
        assert 0.95 < profile.dram_bytes / (2 * tensor) < 2.1, (name, profile.dram_bytes)


def test_kforge_profile_prints_and_saves_the_profile(tmp_path: Path) -> None:
    out_file = tmp_path / "profile.json"
    args = ["profile", "softmax_4096x65536", str(CANDIDATES / "softmax_cuda.py"), "--output", str(out_file)]
    out = subprocess.run([sys.executable, "-m", "graphs.cli", *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "softmax_rows" in out.stdout and "× problem" in out.stdout
    saved = ProfileReport.model_validate_json(out_file.read_text())
    assert saved.problem_bytes == 2 * 4096 * 65536 * 4
    assert set(saved.contenders) == {"eager", "candidate"}


def test_a_run_with_ncu_profiles_each_rounds_fastest_candidate(tmp_path: Path) -> None:
    from graphs.rundata import load_run

    args = ["run", "softmax_4096x65536", "--rounds", "1", "--ideas", "2", "--ncu", "--runs-dir", str(tmp_path)]
    out = subprocess.run([sys.executable, "-m", "graphs.cli", *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    (folder,) = tmp_path.iterdir()
    run = load_run(folder.name, tmp_path)
    profiled = [c for c in run.candidates if "profile" in c.profile]
    assert len(profiled) == 1 and "; ncu: 1 kernel(s)" in (profiled[0].diagnosis or "")
    fastest = max((c for c in run.candidates if c.speedup_vs_best), key=lambda c: c.speedup_vs_best or 0.0)
    assert profiled[0].id == fastest.id
    assert any(m.role == "profiler" and f"{fastest.id} under ncu:" in m.content for m in run.messages)


def test_the_ncu_tool_shows_an_llm_the_kernels_of_both(tmp_path: Path) -> None:
    from agents.llm_tools import make_tools
    from tests.test_tool_calling import context

    ctx = context(tmp_path, device="cuda")
    ctx.settings.ncu = True
    tools = {t.name: t for t in make_tools(ctx, candidate_id="c1-0")}
    text = tools["ncu_candidate"].invoke({"source": (CANDIDATES / "softmax_cuda.py").read_text()})
    assert text.startswith("ok\n") and "softmax_rows" in text, text
    assert "\n  eager " in text and "\n  candidate " in text
