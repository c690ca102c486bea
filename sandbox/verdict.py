"""Turn what came back from a worker (channel bytes, exit, output tails) into its JobResult.

Every backend ends a job the same way, so a verdict means the same thing wherever it ran: a timeout,
a channel holding bytes the worker did not sign (``verdict_forgery``), no verdict at all (``crashed``,
with how the worker ended), or the worker's own signed result.
"""

from __future__ import annotations

import signal

import structlog

from sandbox.channel import CUT_SHORT, unframe
from tools.protocol import AnyJob, JobResult, RuntimeFinding


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def how_it_ended(exit_code: int | None) -> str:
    """``killed by SIGKILL`` for a negative code (a subprocess), ``exit code N`` otherwise."""
    if exit_code is not None and exit_code < 0:
        return f"killed by {signal_name(exit_code)}"
    return f"exit code {exit_code}"


def job_verdict(
    job: AnyJob,
    data: bytes,
    key: bytes,
    *,
    timed_out: bool,
    ended: str,
    exit_code: int | None,
    wall_s: float,
    tails: dict[str, str],
    bound: structlog.typing.FilteringBoundLogger,
) -> JobResult:
    """The job's result; ``ended`` says how the worker ended, for a crash ("exit code 1", ...)."""
    common = {"job_id": job.job_id, "wall_s": round(wall_s, 4), "exit_code": exit_code, **tails}
    if timed_out:
        bound.info("job_timeout", limit_s=job.timeout_s)
        return JobResult(status="timeout", reason=f"killed after {job.timeout_s:g} s wall-clock limit", **common)
    payload, why = unframe(data, key)
    if payload is None and data and why != CUT_SHORT:
        # Bytes the worker did not sign: candidate code wrote to the channel.
        bound.info("job_forged_verdict", why=why)
        finding = RuntimeFinding(trick="verdict_forgery", detail=why)
        return JobResult(status="rejected", reason=f"verdict_forgery: {why}", findings=[finding], **common)
    if payload is None:
        bound.info("job_crashed", exit_code=exit_code, why=why)
        return JobResult(status="crashed", reason=f"worker {ended}: {why}", **common)
    result = JobResult.model_validate_json(payload)
    result = result.model_copy(update={k: v for k, v in common.items() if k != "job_id"})
    bound.info("job_done", status=result.status, wall_s=result.wall_s)
    return result
