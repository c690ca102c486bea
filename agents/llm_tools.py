"""The sandboxed tools as LangChain tools, for LLM agents that compile, check and time their drafts.

``make_tools(ctx)`` returns the ``StructuredTool``s bound to one run's context:

- ``compile_candidate(source)``: does it build? CUDA kernels (string literals) go through NVRTC here
  (no GPU needed, nothing of the candidate runs); CPU candidates build their C at import, so that runs
  in the sandbox, and only whether it compiled is reported.
- ``check_candidate(source)``: compile and compare with the reference on fresh seeded inputs.
- ``profile_candidate(source)``: time it beside the eager reference.
- ``ncu_candidate(source)``, only in runs with ``ncu`` on: its kernels and eager's under Nsight Compute.

Candidate code never runs in the orchestrator: everything that imports it goes through ``ctx.sandbox``.
Each tool answers with a short text for the model; every call is logged (event ``tool_call``) and
counted in a ``ToolStats`` (by default ``ctx.extras["tool_stats"]``).
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel, Field

from sandbox.evaluation import Evaluation, evaluate, profile_job
from tools.collectors import Collector
from tools.compile import DEFAULT_ARCH, check_candidate_cuda
from tools.errors import CandidateError
from tools.ncu import render
from tools.protocol import TimingReport

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from agents.base import RoleContext

log = structlog.get_logger(__name__)

MAX_LOG_CHARS = 4000  # a compiler log or traceback longer than this is cut (its end kept)
TOOL_NAMES = ("compile_candidate", "check_candidate", "profile_candidate")


class CandidateSource(BaseModel):
    """The one argument of every tool: a whole candidate file."""

    source: str = Field(
        description="The complete candidate Python file: imports, kernel source and `class ModelNew(nn.Module)`."
    )


@dataclass
class ToolStats:
    """Calls and sandbox seconds per tool, shared by the threads of a run."""

    calls: dict[str, int] = field(default_factory=dict)
    job_s: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, tool: str, job_s: float) -> int:
        """Count one call; returns this tool's count so far."""
        with self._lock:
            self.calls[tool] = self.calls.get(tool, 0) + 1
            self.job_s[tool] = self.job_s.get(tool, 0.0) + job_s
            return self.calls[tool]

    @property
    def total_calls(self) -> int:
        with self._lock:
            return sum(self.calls.values())


# The sandbox seconds of the jobs a tool call ran, for whoever runs the tool (``jobs_of_the_call``): the call's
# wall time also counts waiting for the host's turn, which is no sandbox time.
_call_jobs: Collector[float] = Collector("call_jobs")


def jobs_of_the_call() -> AbstractContextManager[list[float]]:
    """Collects the wall time of each sandbox job the tools run inside the block (this thread of work only)."""
    return _call_jobs.collecting()


# ------------------------------------------------------------------------------------- formatting


def _tail(text: str, limit: int = MAX_LOG_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]


def _failure(ev: Evaluation) -> str:
    r = ev.result
    text = f"{r.status}: {r.reason}"
    if r.details.strip():
        text += "\n" + _tail(r.details)
    return text


def _errors(ev: Evaluation) -> str:
    c = ev.result.correctness
    if c is None:
        return ""
    passed = sum(1 for check in c.checks if check.passed)
    parts = [f"{passed}/{len(c.checks)} checks passed (atol={c.atol:g} rtol={c.rtol:g})"]
    if (abs_err := c.worst("max_abs_error")) is not None:
        parts.append(f"max abs error {abs_err:.3g}")
    if (rel_err := c.worst("max_rel_error")) is not None:
        parts.append(f"max rel error {rel_err:.3g}")
    return " · ".join(parts)


# ------------------------------------------------------------------------------------------ tools


class _Tools:
    """The tools' bodies, bound to one context (kept together so they share the evaluate call)."""

    def __init__(self, ctx: RoleContext, *, role: str, candidate_id: str | None, stats: ToolStats) -> None:
        self.ctx = ctx
        self.role = role
        self.candidate_id = candidate_id
        self.stats = stats

    def _evaluate(self, source: str, *, timed: bool) -> Evaluation:
        s = self.ctx.settings
        common: dict[str, Any] = {
            "sandbox": self.ctx.sandbox,
            "device": s.device,
            "available_bytes": self.ctx.extras["available_bytes"],
            "candidate_name": f"{self.candidate_id or 'candidate'}.py",
            "policy": s.policy,
            "references": ("eager",),
            "with_roofline": False,
        }
        if timed:
            return evaluate(self.ctx.problem, source, n_checks=1, seed=s.seed + 1, timing=s.timing, **common)
        return evaluate(self.ctx.problem, source, n_checks=s.n_checks, seed=s.seed, time_candidate=False, **common)

    def _done(self, tool: str, started: float, job_s: float, status: str, source: str) -> None:
        count = self.stats.add(tool, job_s)
        _call_jobs.add(job_s)
        log.bind(role=self.role, tool=tool).info(
            "tool_call",
            candidate_id=self.candidate_id,
            status=status,
            seconds=round(time.perf_counter() - started, 3),
            job_s=round(job_s, 3),
            source_chars=len(source),
            count=count,
        )

    def compile_candidate(self, source: str) -> str:
        started = time.perf_counter()
        if _target(self.ctx) == "cuda":
            text, status = self._compile_cuda(source)
            self._done("compile_candidate", started, 0.0, status, source)
            return text
        ev = self._evaluate(source, timed=False)
        self._done("compile_candidate", started, ev.result.wall_s, ev.status, source)
        if ev.status == "compile_error" or ev.rejected_unrun:  # unrun: nothing was compiled either
            return _failure(ev)
        return "ok: it compiled. (check_candidate tells whether it runs and matches the reference.)"

    def _compile_cuda(self, source: str) -> tuple[str, str]:
        filename = f"{self.candidate_id or 'candidate'}.py"
        try:
            reports = check_candidate_cuda(source, arch=DEFAULT_ARCH, filename=filename)
        except SyntaxError as exc:
            return f"compile_error: the file is not valid Python: line {exc.lineno}: {exc.msg}", "compile_error"
        if not reports:
            return (
                "not checked: no CUDA kernel found as a plain string literal (kernels built with f-strings, "
                "concatenation or load_inline compile only at import: use check_candidate).",
                "skipped",
            )
        failed = [r for r in reports if not r.ok]
        if not failed:
            return f"ok: {len(reports)} kernel source(s) compiled with NVRTC for {DEFAULT_ARCH}.", "ok"
        logs = "\n\n".join(r.log for r in failed)
        return f"compile_error: {len(failed)} of {len(reports)} kernel source(s) failed\n{_tail(logs)}", "compile_error"

    def check_candidate(self, source: str) -> str:
        started = time.perf_counter()
        ev = self._evaluate(source, timed=False)
        self._done("check_candidate", started, ev.result.wall_s, ev.status, source)
        if ev.status == "ok":
            return f"ok: correct. {_errors(ev)}".strip()
        text = _failure(ev)
        errors = _errors(ev)
        return f"{text}\n{errors}" if errors else text

    def profile_candidate(self, source: str) -> str:
        started = time.perf_counter()
        ev = self._evaluate(source, timed=True)
        self._done("profile_candidate", started, ev.result.wall_s, ev.status, source)
        timing = ev.result.timing
        if ev.status != "ok" or timing is None or "candidate" not in timing.stats:
            return _failure(ev)
        eager, cand = timing.stats["eager"], timing.stats["candidate"]
        speedup = eager.median_ms / cand.median_ms
        return (
            f"ok: speedup vs eager {speedup:.3f}x\n"
            f"eager      median {eager.median_ms:.4f} ms (p10 {eager.p10_ms:.4f}, p90 {eager.p90_ms:.4f}, "
            f"spread {100 * eager.spread:.1f}%, {eager.trials} trials)\n"
            f"candidate  median {cand.median_ms:.4f} ms (p10 {cand.p10_ms:.4f}, p90 {cand.p90_ms:.4f}, "
            f"spread {100 * cand.spread:.1f}%, {cand.trials} trials)" + _host_line(timing)
        )

    def ncu_candidate(self, source: str) -> str:
        started = time.perf_counter()
        problem = self.ctx.problem
        try:
            job = profile_job(
                problem,
                source,
                candidate_name=f"{self.candidate_id or 'candidate'}.py",
                contenders=["eager", "candidate"],
                seed=self.ctx.settings.seed,
            )
        except CandidateError as exc:
            self._done("ncu_candidate", started, 0.0, "refused", source)
            return f"not profiled: {exc}"
        result = self.ctx.sandbox.run(job)
        self._done("ncu_candidate", started, result.wall_s, result.status, source)
        if result.status != "ok" or result.profile is None:
            return f"{result.status}: {result.reason}\n{_tail(result.details)}".strip()
        report = result.profile.model_copy(update={"problem_bytes": problem.info.bytes_moved})
        return "ok\n" + render(report, problem.name, job.warmup)


def _host_line(timing: TimingReport) -> str:
    """The host's share, where the timing hid it: a wrapper whose host time nears its GPU time is launch-bound."""
    eager, cand = timing.stats["eager"], timing.stats["candidate"]
    if not timing.launch_hidden or eager.host_median_ms is None or cand.host_median_ms is None:
        return ""
    return (
        f"\nhost time inside the call (hidden from the times above: the GPU waited while it ran): "
        f"eager {eager.host_median_ms:.4f} ms, candidate {cand.host_median_ms:.4f} ms"
    )


_COMPILE_DESCRIPTIONS = {
    "cuda": (
        "Compile the CUDA kernels of a candidate file with NVRTC and report compiler errors with the file's line "
        "numbers. Fast; it does not run the candidate or check its results. Returns 'ok: ...' or the compiler log."
    ),
    "cpu": (
        "Build the C kernels of a candidate file (by importing it in the sandbox) and report compiler errors, "
        "with the file's line numbers. It does not check results. Returns 'ok: ...' or the compiler log."
    ),
}
_DESCRIPTIONS = {
    "check_candidate": (
        "Compile a candidate file, run it in the sandbox on fresh random inputs and compare its outputs with "
        "the reference. Returns the status (ok, compile_error, runtime_error, incorrect, timeout, crashed), "
        "the reason, the largest errors, and the log or traceback when there is one."
    ),
    "profile_candidate": (
        "Time a candidate file beside the eager PyTorch reference in the sandbox (one correctness check "
        "first). Returns the median times, their spread and the speedup vs eager. Slower than the other tools."
    ),
    "ncu_candidate": (
        "Profile one call of a candidate file and of the eager reference under Nsight Compute. Returns every "
        "kernel each launched with its grid and block, registers, time, DRAM bytes read and written (and their "
        "ratio to the problem's own bytes), SM and memory throughput and occupancy. It does not check results. "
        "Slow (seconds per kernel)."
    ),
}


def make_tools(
    ctx: RoleContext, *, role: str = "coder", candidate_id: str | None = None, stats: ToolStats | None = None
) -> list[BaseTool]:
    """compile_candidate, check_candidate and profile_candidate, bound to ``ctx``; with ``--ncu`` (the run's
    ``ncu`` setting) also ncu_candidate.

    ``candidate_id`` names the sandbox jobs and log lines; ``stats`` defaults to the run's shared
    ``ctx.extras["tool_stats"]`` (created on first use).
    """
    from langchain_core.tools import StructuredTool

    if stats is None:
        stats = ctx.extras.setdefault("tool_stats", ToolStats())
    impl = _Tools(ctx, role=role, candidate_id=candidate_id, stats=stats)
    descriptions = {**_DESCRIPTIONS, "compile_candidate": _COMPILE_DESCRIPTIONS[_target(ctx)]}
    names = TOOL_NAMES + (("ncu_candidate",) if ctx.settings.ncu else ())
    return [
        StructuredTool.from_function(
            func=getattr(impl, name), name=name, description=descriptions[name], args_schema=CandidateSource
        )
        for name in names
    ]


def _target(ctx: RoleContext) -> str:
    return "cuda" if ctx.settings.device == "cuda" else "cpu"
