"""The dynamic anti-cheat checks: every cheat fixture run in the real worker is rejected for its trick.

Each fixture in ``tests/fixtures/cheats/`` is a ``ModelNew`` for ``problems/softmax_small.py`` whose
docstring names its trick. Here it runs in a real sandboxed worker through ``sandbox.evaluation.evaluate``
with ``static_precheck=False``: the static checks would reject most fixtures before anything ran, and what is
under test here is that the worker catches them too. Static and dynamic findings together reject it; the
worker alone (its ``findings``) must name the trick too, except for the few tricks only the source shows
(``SOURCE_ONLY``, each with the reason). Fixtures that use CUDA run under the ``gpu`` marker, on the GPU.
"""

from __future__ import annotations

import ast
import re
import subprocess
import threading
from pathlib import Path

import pytest
import torch

from agents.critic import Critic
from sandbox.evaluation import Evaluation, evaluate, review_flags
from sandbox.local import LocalSandbox
from tests.conftest import FIXTURES, PROBLEMS
from tools import runtime_checks
from tools.problem import load_problem
from tools.protocol import JobResult, TimingConfig, TimingReport, TimingStats

CHEATS = sorted((FIXTURES / "cheats").glob("*.py"))
QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)
SANDBOX = LocalSandbox()  # one fork server for the module: each job is still its own process
# What running the candidate cannot show, and why the static checks are the ones that name it.
SOURCE_ONLY = {
    # prints a fake verdict: stdout is never read, so at run time it is harmless (and unseen)
    "verdict_forgery_print",
    # reads object memory through ctypes.cast(id(x)): no audit event, no visible effect
    "frame_inspection_ctypes",
    # rounds to fp16 inside its own kernel: at run time only the error shows it
    "precision_downgrade_ptx_half",
}
# Tricks that defeat themselves at run time: the answer is wrong whatever the trick hides.
SELF_DEFEATING = {
    # returns the pinned CPU buffer of a non-blocking copy: for a CUDA problem that is the wrong device
    "side_stream_non_blocking",
}
# On the CPU, malloc may hand torch.empty memory the poison never reached: caught (as incorrect)
# but named only on the GPU, where the caching allocator's free blocks are all poisoned.
NAMED_ON_GPU_ONLY = {"uninitialised_memory_freed_output", "uninitialised_memory_fmax"}


def trick_of(path: Path) -> str:
    return (ast.get_docstring(ast.parse(path.read_text())) or "").split(":")[0]


def problem_of(path: Path) -> str:
    """``softmax_small.py`` unless the docstring has a ``Problem: NAME`` line."""
    found = re.search(r"^Problem: (\w+)", ast.get_docstring(ast.parse(path.read_text())) or "", re.MULTILINE)
    return f"{found.group(1)}.py" if found else "softmax_small.py"


def needs_gpu(path: Path) -> bool:
    source = path.read_text()
    return "cuda" in source.lower() or path.stem in NAMED_ON_GPU_ONLY


def run(
    path: Path, device: str, problem: str = "softmax_small.py", policy: str = "relaxed", separate: bool = True
) -> Evaluation:
    return evaluate(
        load_problem(PROBLEMS / problem),
        path.read_text(),
        sandbox=SANDBOX,
        device=device,  # type: ignore[arg-type]
        available_bytes=8 << 30,
        candidate_name=path.name,
        policy=policy,  # type: ignore[arg-type]
        references=("eager",),
        n_checks=3,
        timing=QUICK,
        timeout_s=120,
        with_roofline=False,
        static_precheck=False,  # run it anyway: the worker's own checks are under test
        separate_candidate=separate,
    )


def assert_caught(path: Path, device: str, separate: bool = True) -> None:
    trick = trick_of(path)
    policy = "strict" if trick == "precision_downgrade" else "relaxed"
    ev = run(path, device, problem_of(path), policy=policy, separate=separate)
    assert not ev.accepted, ev.result
    named = {f.split(" ")[0].rstrip(":") for f in ev.anti_cheat} | {ev.result.reason.split(":")[0]}
    assert trick in named, (ev.anti_cheat, ev.result.status, ev.result.reason)
    if path.stem in SELF_DEFEATING and ev.result.status == "incorrect":
        return
    if path.stem in SOURCE_ONLY or (device == "cpu" and path.stem in NAMED_ON_GPU_ONLY):
        return
    dynamic = {f.trick for f in ev.result.findings} | {ev.result.reason.split(":")[0]}
    assert trick in dynamic, (ev.result.status, ev.result.reason, ev.result.findings)


@pytest.mark.parametrize("path", [p for p in CHEATS if not needs_gpu(p)], ids=lambda p: p.stem)
def test_cheat_is_caught_on_the_cpu(path: Path) -> None:
    assert_caught(path, "cpu")


@pytest.mark.parametrize("path", [p for p in CHEATS if not needs_gpu(p)], ids=lambda p: p.stem)
def test_cheat_is_caught_on_the_cpu_with_the_candidate_in_the_worker(path: Path) -> None:
    # The path CUDA jobs take (no runner yet), held to the same fixtures where no GPU is at hand
    assert_caught(path, "cpu", separate=False)


@pytest.mark.gpu
@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_is_caught_on_the_gpu(path: Path) -> None:
    assert_caught(path, "cuda")


@pytest.mark.parametrize("path", [p for p in CHEATS if p.stem in NAMED_ON_GPU_ONLY], ids=lambda p: p.stem)
def test_uninitialised_reads_never_pass_on_the_cpu(path: Path) -> None:
    ev = run(path, "cpu")
    assert not ev.accepted and ev.result.status in ("incorrect", "rejected"), ev.result


def _bytes_as(byte: int, dtype: torch.dtype) -> float:
    return float(torch.full((8,), byte, dtype=torch.uint8).view(dtype)[0])


@pytest.mark.skipif(not runtime_checks._malloc_perturb(0), reason="the C library has no mallopt (not glibc)")
@pytest.mark.parametrize("value, byte", [(float("nan"), 0x7F), (1e30, 0x7F), (-1e30, 0xFE)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_on_the_cpu_every_block_handed_out_in_a_poisoned_call_holds_a_huge_value(
    value: float, byte: int, dtype: torch.dtype
) -> None:
    # Small blocks as a candidate's scratch takes them (the fmax fixture's (rows, 1)), not only those sized like
    # the outputs that poison fills.
    with runtime_checks.poisoned(torch.device("cpu"), [torch.zeros(4096)], value):
        blocks = [torch.empty(n, dtype=dtype) for n in (1, 7, 96, 1000, 3000)]
    fill = _bytes_as(byte, dtype)
    assert abs(fill) > 1e38
    assert all(bool((b == fill).all()) for b in blocks), [b[:4] for b in blocks]


def test_degenerate_problem_is_flagged_and_a_real_kernel_still_passes() -> None:
    # softmax over 32768 columns: every value is below atol=1e-2, so zeros would pass the tolerance.
    ev = run(PROBLEMS / "candidates" / "softmax_cpu.py", "cpu", "softmax_wide_small.py")
    assert ev.accepted, ev.result
    assert any(w.startswith("degenerate problem: a constant") for w in ev.warnings), ev.warnings
    assert ev.result.findings == []
    strict = run(PROBLEMS / "candidates" / "softmax_cpu.py", "cpu", "softmax_wide_small.py", policy="strict")
    assert not any(w.startswith("degenerate") for w in strict.warnings)
    assert not any(w.startswith("degenerate") for w in run(PROBLEMS / "candidates" / "softmax_cpu.py", "cpu").warnings)


def test_a_right_answer_in_another_memory_layout_is_accepted_with_a_warning(tmp_path: Path) -> None:
    source = (PROBLEMS / "candidates" / "softmax_cpu.py").read_text()
    assert "class ModelNew(nn.Module):" in source
    column_major = tmp_path / "softmax_column_major.py"
    column_major.write_text(
        source.replace("class ModelNew(nn.Module):", "class RowMajor(nn.Module):") + "\n\nclass ModelNew(RowMajor):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return super().forward(x).t().contiguous().t()\n"
    )
    ev = run(column_major, "cpu")
    assert ev.accepted, ev.result
    layout = [w for w in ev.warnings if w.startswith("layout:")]
    assert layout == [
        "layout: the output has strides (1, 96) where the reference's has (3000, 1) (the same values "
        "in another memory order; code that relies on the reference's may fail or misread it)"
    ], ev.warnings
    assert not any(w.startswith("layout:") for w in run(PROBLEMS / "candidates" / "softmax_cpu.py", "cpu").warnings)


def test_second_shape_is_checked_where_the_problem_allows_one() -> None:
    ev = run(PROBLEMS / "candidates" / "layernorm_cpu.py", "cpu", problem="layernorm_small.py")
    assert ev.accepted, ev.result
    assert "second-shape check skipped" not in ev.result.details


def test_a_speedup_over_ten_is_flagged_for_review() -> None:
    def stats(ms: float) -> TimingStats:
        return TimingStats(trials=100, median_ms=ms, mean_ms=ms, min_ms=ms, p10_ms=ms, p90_ms=ms, iqr_ms=0, std_ms=0)

    def evaluation(candidate_ms: float) -> Evaluation:
        timing = TimingReport(
            method="perf_counter",
            input_sets=100,
            flush_bytes=0,
            stats={"eager": stats(12.0), "candidate": stats(candidate_ms)},
            seconds=1,
        )
        result = JobResult(job_id="j", status="ok", timing=timing)
        return Evaluation(
            problem="p", problem_path="p.py", candidate="c.py", device="cpu", policy="relaxed", result=result
        )

    assert review_flags(evaluation(2.0)) == []  # 6×
    assert review_flags(evaluation(1.0))[0].startswith("12.0× over the best reference is more than 10×")
    verdict, reason = Critic().judge({"id": "c1-0", "status": "ok", "reason": "", "speedup_vs_best": 12.0}, None)  # type: ignore[arg-type]
    assert verdict == "accepted" and reason.endswith("over 10×: flagged for review")


def test_only_children_started_by_the_candidate_are_flagged() -> None:
    # torch.compile starts its compile workers before the candidate is imported: they are the harness's.
    x = [torch.ones(4)]
    harness = subprocess.Popen(["sleep", "30"])
    spawned: list[subprocess.Popen[bytes]] = []
    try:
        kids = frozenset(runtime_checks.child_processes())
        assert harness.pid in kids
        _, found = runtime_checks.watch_call(
            lambda t: t * 2, x, torch.device("cpu"), lambda: None, set(threading.enumerate()), kids
        )
        assert found == []

        def forks(t: torch.Tensor) -> torch.Tensor:
            spawned.append(subprocess.Popen(["sleep", "30"]))
            return t * 2

        _, found = runtime_checks.watch_call(
            forks, x, torch.device("cpu"), lambda: None, set(threading.enumerate()), kids
        )
        assert [f.trick for f in found] == ["thread"] and str(spawned[0].pid) in found[0].detail, found
    finally:
        for proc in [harness, *spawned]:
            proc.kill()
            proc.wait()


def test_each_output_is_judged_degenerate_under_its_own_tolerance() -> None:
    from tools.runtime_checks import degenerate_warnings

    index = torch.arange(4096)  # an integer first output: compared exactly, so never "degenerate"
    small = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 1e-4  # within 1e-2 of 0
    warnings = degenerate_warnings([index, small], "relaxed")
    assert len(warnings) == 1 and warnings[0].startswith("degenerate problem: a constant (")
    assert "output 1" in warnings[0]
    assert degenerate_warnings([index, small], "strict") == []  # 1e-4 spread is beyond strict's 1e-4 atol
