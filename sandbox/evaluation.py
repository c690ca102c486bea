"""Evaluate a candidate end to end: validate inputs here, run the job in a sandbox, add the roofline.

This is the one entry point the CLI and the agent graph share, so a verdict means the same thing
wherever it was produced. The static anti-cheat checks come first, on the source: a candidate they
reject is never sent to a sandbox (no job, nothing of it runs), and comes back ``rejected`` with the
findings; only a candidate they pass runs, under the worker's dynamic checks.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, Field

from sandbox.config import Sandbox
from sandbox.devices import WaitNotice
from tools import speed
from tools.checks import Finding, blocking, static_findings
from tools.device_shares import slots_for
from tools.errors import CandidateError, EnvironmentProblem
from tools.problem import Problem, check_fits
from tools.protocol import (
    Ceilings,
    CeilingsJob,
    Device,
    EvalJob,
    JobResult,
    Policy,
    ProfileJob,
    TimingConfig,
    TimingReport,
)
from tools.roofline import Floor, cached_ceilings, floor, percent_of_roofline, store_ceilings

log = structlog.get_logger(__name__)

JOB_NOTICE_S = 30.0  # a search's job still running after this long is said on the console (eval asks sooner)
REVIEW_SPEEDUP = 10.0  # a speedup above this is reported, and flagged for a human to look at
NOISY_SPREAD = 0.5  # a contender's interquartile range over its median above this: its times are not one level
NOISY_DISAGREEMENT = 0.10  # paired and ratio-of-medians speedups further apart than this: the machine had slow spells


class Evaluation(BaseModel):
    """A job's verdict put in context: the problem, its roofline floor and the speedups."""

    problem: str
    problem_path: str
    candidate: str | None
    device: Device
    policy: Policy
    result: JobResult
    ceilings: Ceilings | None = None
    floor: Floor | None = None
    anti_cheat: list[str] = Field([], description="anti-cheat findings (static, then dynamic) that reject it")
    reduced_precision: list[str] = Field(
        [],
        description="where it computes below the problem's precision (static, then dynamic findings) and the "
        "relaxed policy allows it: every report says so",
    )
    warnings: list[str] = Field([], description="degenerate problem, a speedup over 10× to review, ...")
    rejected_unrun: bool = Field(
        False, description="the static checks rejected it from its source, so no job ran (nothing compiled or ran)"
    )

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def accepted(self) -> bool:
        """Correct, timed where asked, and no anti-cheat finding: a number to trust."""
        return self.result.status == "ok" and not self.anti_cheat

    def speedups(self) -> dict[str, float | None]:
        timing = self.result.timing
        if timing is None or "candidate" not in timing.stats:
            return {}
        return {
            "vs_eager": timing.speedup("eager"),
            "vs_compile": timing.speedup("compile"),
            "vs_best": timing.speedup_vs_best,
        }

    def speed_vs_best(self) -> tuple[tuple[float, float] | None, speed.Verdict | None]:
        """The interval of the speedup over the best reference, and what it allows saying (``tools.speed``):
        faster, slower, or not distinguishable; (None, None) untimed, or from a report saved before intervals."""
        timing = self.result.timing
        ref = timing.best_reference if timing is not None and "candidate" in timing.stats else None
        if timing is None or ref is None:
            return None, None
        interval = timing.interval(ref)  # type: ignore[arg-type]
        return interval, speed.verdict(interval, timing.medians_ratio(ref, "candidate"))  # type: ignore[arg-type]

    def percent_of_roofline(self, contender: str = "candidate") -> float | None:
        timing = self.result.timing
        if self.floor is None or timing is None or contender not in timing.stats:
            return None
        return percent_of_roofline(self.floor.floor_ms, timing.stats[contender].median_ms)


def review_flags(evaluation: Evaluation) -> list[str]:
    """A speedup too good to take on trust (over ``REVIEW_SPEEDUP``× the best reference), and a noisy timing."""
    flags = noise_flags(evaluation.result.timing) if evaluation.result.timing else []
    best = evaluation.speedups().get("vs_best")
    if best is not None and best > REVIEW_SPEEDUP:
        flags.append(
            f"{best:.1f}× over the best reference is more than {REVIEW_SPEEDUP:g}×: review it before trusting it"
        )
    return flags


def noise_flags(timing: TimingReport) -> list[str]:
    """One line when the times are too noisy to take a ratio from on trust: a contender's spread over
    ``NOISY_SPREAD``, or a speedup whose paired estimate (the one reported) and ratio of medians differ by more
    than ``NOISY_DISAGREEMENT``."""
    spreads = {name: s.spread for name, s in timing.stats.items() if s.spread > NOISY_SPREAD}
    apart = {}
    for ref in ("eager", "compile"):
        paired = timing.paired.get(f"{ref}/candidate")
        medians = timing.medians_ratio(ref, "candidate")  # type: ignore[arg-type]
        if paired and medians and abs(math.log(medians / paired)) > math.log1p(NOISY_DISAGREEMENT):
            apart[ref] = (paired, medians)
    if not spreads and not apart:
        return []
    said = [f"{name}'s spread {spread:.2f}" for name, spread in spreads.items()]
    said += [f"vs {ref} {p:.3f}× from per-trial pairs but {m:.3f}× from the medians" for ref, (p, m) in apart.items()]
    return [
        "noisy timing (" + "; ".join(said) + "): the machine had slow spells while it ran (another process on its "
        "cores?); the paired ratios are the ones reported, but time it again on a quiet machine before trusting it"
    ]


def read_candidate(path: str | Path) -> str:
    path = Path(path)
    if path.is_dir():
        raise CandidateError(f"{path}: a folder, not a candidate file")
    if not path.is_file():
        raise CandidateError(f"{path}: no such candidate file")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CandidateError(f"{path}: not a UTF-8 text file") from exc
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise CandidateError(f"{path}: Python syntax error at line {exc.lineno}: {exc.msg}") from exc
    if not defines(source, "ModelNew"):
        raise CandidateError(f"{path}: defines no `ModelNew` (a candidate is an nn.Module subclass of that name)")
    return source


def defines(source: str, name: str) -> bool:
    """Does ``source`` (valid Python) bind ``name`` anywhere: a class, a function, an assignment, an import?
    Generous on purpose: it only spares a file that cannot be a candidate the reference's work before it is
    refused; the worker still checks what the name holds."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[-1]) == name:
            return True
        if isinstance(node, ast.alias) and node.name == "*":
            return True  # `from module import *` may bind it
    return False


def profile_job(
    problem: Problem, candidate_source: str | None, *, candidate_name: str = "candidate.py", **fields: Any
) -> ProfileJob:
    """An Nsight Compute job on ``problem`` (``fields``: ProfileJob's contenders, seed, ...).

    CandidateError when the static anti-cheat checks reject the candidate: a profile job may run with the
    profiler's privileges (root and CAP_SYS_ADMIN in the docker backend's profile container), so code they
    flag never gets there.
    """
    if candidate_source is not None:
        refused = blocking(static_findings(candidate_source, problem.info), "relaxed")
        if refused:
            raise CandidateError(f"{candidate_name}: the static anti-cheat checks reject it ({refused[0]})")
    return ProfileJob(
        problem_name=str(problem.path),
        problem_source=problem.source,
        candidate_name=candidate_name,
        candidate_source=candidate_source,
        **fields,
    )


def static_rejection(job_id: str, findings: list[Finding]) -> JobResult:
    """The verdict on a candidate the static checks reject (``findings``: the blocking ones), given in place of
    a job's: ``rejected``, the reason naming the first trick as a worker's rejection does, and no job run."""
    first = findings[0]
    where = f" (line {first.line})" if first.line is not None else ""
    return JobResult(
        job_id=job_id,
        status="rejected",
        reason=f"{first.trick}: {first.detail}{where}; found in the source by the static checks, so it was not run",
        details="\n".join(str(f) for f in findings),
    )


def get_ceilings(sandbox: Sandbox, device: Device, device_name: str, refresh: bool = False) -> Ceilings:
    """The device's ceilings from the cache, measured in the sandbox on first use."""
    if not refresh and (cached := cached_ceilings(device, device_name)):
        return cached
    log.info("measuring_ceilings", device=device, device_name=device_name)
    result = sandbox.run(CeilingsJob(device=device))
    if result.status != "ok" or result.ceilings is None:
        raise EnvironmentProblem(f"measuring the {device} ceilings failed: {result.reason}")
    store_ceilings(result.ceilings, device_name)
    return result.ceilings


def evaluate(
    problem: Problem,
    candidate_source: str | None,
    *,
    sandbox: Sandbox,
    device: Device,
    available_bytes: int,
    candidate_name: str = "candidate.py",
    policy: Policy = "relaxed",
    references: tuple[str, ...] = ("eager", "compile"),
    n_checks: int = 5,
    seed: int = 0,
    timing: TimingConfig | None = None,
    timeout_s: float = 600.0,
    with_roofline: bool = True,
    time_candidate: bool = True,
    static_precheck: bool = True,
    notice_after_s: float = JOB_NOTICE_S,
    separate_candidate: bool = True,
) -> Evaluation:
    """Judge ``candidate_source`` (None: the reference alone) on ``problem`` in ``sandbox``.

    ``static_precheck=False`` runs the job even when the static checks reject the candidate (their findings
    still reject it, after the job). It exists for one purpose: testing the harness itself on code of this
    project the static checks reject by construction, the cheat fixtures (the worker's dynamic checks must catch
    them too: tests/test_runtime_checks.py, bench/checks_dynamic.py) and the problem's own code as its
    candidate (it runs the reference's op, and every memory probe with it: tests/test_memory.py,
    bench/memory_plan.py). Never pass it for a candidate a user or an agent wrote.

    ``separate_candidate=False`` runs a CPU job's candidate in the worker, as CUDA jobs still do (sandbox.runner): for
    tests of that path on machines without a GPU.

    A job still running after ``notice_after_s`` is said on the console, then every ``WAIT_REPEAT_S``
    (``sandbox.devices.WaitNotice``): `kforge eval` waits on one job alone and asks early; a search runs many.
    """
    working_set = check_fits(problem.info, device, available_bytes, n_checks)
    found = static_findings(candidate_source, problem.info) if candidate_source else []
    rejecting = blocking(found, policy)
    job = EvalJob(
        problem_name=str(problem.path),
        problem_source=problem.source,
        candidate_name=candidate_name,
        candidate_source=candidate_source,
        device=device,
        policy=policy,
        n_checks=n_checks,
        seed=seed,
        references=list(references),  # type: ignore[arg-type]
        timing=timing or TimingConfig(),
        timeout_s=timeout_s,
        time_candidate=time_candidate,
        separate_candidate=separate_candidate,
        device_slots=slots_for(working_set, available_bytes),
    )
    bound = log.bind(job_id=job.job_id, problem=problem.name, candidate=candidate_name)
    bound.info("evaluate_start", device=device, policy=policy)
    if rejecting and static_precheck:
        # Flagged code never runs, not even in the sandbox: a fork bomb or a write outside scratch would
        # happen at import, before any dynamic check could end the job.
        bound.info("evaluate_static_rejection", findings=[str(f) for f in rejecting])
        result = static_rejection(job.job_id, rejecting)
    else:
        what = f"the job of {candidate_name if candidate_source is not None else 'the reference'} on {device}"
        notice = WaitNotice(
            f"{what} (a turn, the reference, {'the checks, ' if candidate_source else ''}the timing)",
            first_s=notice_after_s,
        )
        try:
            result = sandbox.run(job)
        finally:
            notice.stop()
    evaluation = Evaluation(
        anti_cheat=[str(f) for f in rejecting] + [str(f) for f in result.findings if f.blocking],
        reduced_precision=[str(f) for f in found if f not in rejecting]
        + [str(f) for f in result.findings if not f.blocking],
        warnings=list(result.warnings),
        problem=problem.name,
        problem_path=str(problem.path),
        candidate=candidate_name if candidate_source is not None else None,
        device=device,
        policy=policy,
        result=result,
        rejected_unrun=bool(rejecting) and static_precheck,
    )
    device_name = result.environment.get("gpu") or result.environment.get("cpu")
    if with_roofline and result.timing is not None and device_name:
        ceilings = get_ceilings(sandbox, device, device_name)
        evaluation.ceilings = ceilings
        evaluation.floor = floor(problem.info, ceilings, policy)
    evaluation.warnings += review_flags(evaluation)
    bound.info("evaluate_done", status=result.status, speedups=evaluation.speedups())
    return evaluation
