"""The worker's half of a profile job: ncu around ``sandbox.profile_target``, once per contender.

The profiled process is a child of the worker, so it runs inside the same sandbox (process group,
container, limits) and its kernels' counters come back as a file the worker reads; the verdict still
goes out on the worker's own channel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from tools import ncu
from tools.ncu import ContenderProfile, ProfileReport
from tools.protocol import ProfileJob

TAIL_CHARS = 4000


class ProfileFailed(Exception):
    def __init__(self, status: Literal["runtime_error", "timeout"], reason: str, details: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.details = details


def profile(job: ProfileJob, cuda_available: bool) -> ProfileReport:
    """Every contender's kernels for one call; ProfileFailed (one line) when that cannot be had."""
    if not cuda_available:
        raise ProfileFailed("runtime_error", "profiling needs a CUDA device: none is visible to the worker")
    try:
        ncu_path = ncu.find_ncu(job.ncu)
    except ncu.NcuError as exc:
        raise ProfileFailed("runtime_error", str(exc)) from exc
    scratch = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
    job_file = scratch / f"profile-{job.job_id}.json"
    job_file.write_text(job.model_dump_json())
    deadline = time.monotonic() + job.timeout_s
    contenders = {c: _profile_one(job, c, ncu_path, job_file, scratch, deadline) for c in job.contenders}
    return ProfileReport(ncu=ncu.version(ncu_path), metrics=list(ncu.METRICS.values()), contenders=contenders)


def _profile_one(
    job: ProfileJob, contender: str, ncu_path: str, job_file: Path, scratch: Path, deadline: float
) -> ContenderProfile:
    log_file, error_file = scratch / f"ncu-{contender}.csv", scratch / f"target-{contender}.error"
    target = [sys.executable, "-m", "sandbox.profile_target", "--job", str(job_file), "--contender", contender]
    target += ["--error-file", str(error_file)]
    try:
        proc = subprocess.run(
            ncu.command(ncu_path, str(log_file), target),
            capture_output=True,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ProfileFailed("timeout", f"{contender}: ncu ran past the job's {job.timeout_s:g} s") from exc
    log = log_file.read_text(errors="replace") if log_file.exists() else ""
    printed = (proc.stdout or "") + (proc.stderr or "")
    details = (printed + log)[-TAIL_CHARS:]
    if error_file.exists() and error_file.read_text().strip():
        raise ProfileFailed("runtime_error", f"{contender}: {error_file.read_text().strip()}", details)
    if proc.returncode != 0 or ncu.NO_COUNTERS in printed + log:
        raise ProfileFailed(
            "runtime_error", f"{contender}: {ncu.failure_reason(printed + log, proc.returncode)}", details
        )
    try:
        kernels = ncu.parse_csv(log)
    except ncu.NcuError as exc:
        raise ProfileFailed("runtime_error", f"{contender}: {exc}", details) from exc
    if not kernels:
        raise ProfileFailed("runtime_error", f"{contender}: its call launched no CUDA kernel that ncu saw", details)
    return ContenderProfile(contender=contender, kernels=kernels)
