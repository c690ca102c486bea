"""The job protocol between the orchestrator and a sandboxed worker.

A ``Job`` carries everything the worker needs as text (problem and candidate sources, options), so
the same job runs unchanged in a local subprocess or in a container. A ``JobResult`` is the worker's
verdict; a candidate's crash, hang or wrong answer is a status here, never an exception in the caller.
"""

from __future__ import annotations

import uuid
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from tools.compile import CompileReport
from tools.device_shares import DEVICE_SLOTS
from tools.ncu import ProfileReport

Device = Literal["cuda", "cpu"]
Policy = Literal["relaxed", "strict"]
Contender = Literal["eager", "compile", "candidate"]
Status = Literal["ok", "compile_error", "runtime_error", "incorrect", "rejected", "timeout", "crashed"]

STATUS_MEANING: dict[str, str] = {
    "ok": "compiled, correct on every check, timed",
    "compile_error": "a kernel did not compile (NVRTC, C compiler or load_inline)",
    "runtime_error": "an exception while building or running the model (CUDA error, out of memory, ...)",
    "incorrect": "ran, but an output differs from the reference beyond the tolerance, or inputs were mutated",
    "rejected": "an anti-cheat check caught a trick, in its source (then nothing of it ran) or while it ran "
    "(the reason names it); it is never timed",
    "timeout": "the job ran past its wall-clock limit and was killed",
    "crashed": "the worker or the candidate's process died without a valid answer (segfault, exit, tampered "
    "result channel)",
}


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


class TimingConfig(BaseModel):
    """How contenders are timed. Trials run until both minimums are met, or a maximum is hit."""

    min_trials: int = Field(
        100,
        ge=1,
        description="trials to reach; fewer (never below 20) where this many would take over long_trials_s",
    )
    long_trials_s: float = Field(
        2.0,
        gt=0,
        description="the time min_trials may take: longer calls get fewer trials, at least 20 (tools.timing)",
    )
    min_seconds: float = Field(0.5, ge=0)
    max_trials: int = Field(10_000, ge=1)
    max_seconds: float = Field(20.0, gt=0)
    warmup_trials: int = Field(5, ge=1)
    flush_cache: bool = Field(
        True,
        description="evict the cache before each call: CUDA reads a buffer twice the L2 (leaving clean lines), the "
        "CPU writes one larger than the last-level cache",
    )
    hide_launch: bool = Field(
        True,
        description="CUDA: hold the stream while the host enqueues each call, so the events time its GPU work; "
        "False: synchronise before each call and count the host's work up to the launch as idle GPU time",
    )


class ProblemJob(BaseModel):
    """A job on a problem and, where there is one, a candidate: both travel as text."""

    job_id: str = Field(default_factory=new_job_id)
    problem_name: str
    problem_source: str
    candidate_name: str = "candidate.py"
    candidate_source: str | None = None


class EvalJob(ProblemJob):
    """Check a candidate against a problem's reference and time them side by side.

    With ``candidate_source`` None the job times the reference alone (the run's baseline).
    """

    kind: Literal["evaluate"] = "evaluate"
    device: Device = "cuda"
    policy: Policy = "relaxed"
    n_checks: int = Field(5, ge=1, description="fresh seeded input sets the outputs are compared on")
    seed: int = 0
    references: list[Literal["eager", "compile"]] = ["eager", "compile"]
    timing: TimingConfig = TimingConfig()
    time_candidate: bool = Field(True, description="False: correctness only")
    arch: str | None = Field(None, description="NVRTC arch for the compile pre-check; None: the device's")
    timeout_s: float = Field(600.0, gt=0)
    separate_candidate: bool = Field(
        True,
        description="run the candidate in a process of its own, the runner (sandbox.runner): CPU jobs; a CUDA job "
        "runs it in the worker until the runner is verified on a GPU",
    )
    device_slots: int = Field(
        1,
        ge=1,
        le=DEVICE_SLOTS,
        description=f"the shares of its device's memory a check (correctness only) holds while it runs, out of "
        f"{DEVICE_SLOTS}: checks share a device while their shares add up to no more; {DEVICE_SLOTS}: it runs alone",
    )

    @property
    def timed(self) -> bool:
        """Does the job time anything?"""
        return self.time_candidate and (bool(self.references) or self.candidate_source is not None)

    @property
    def split(self) -> bool:
        """Does the candidate run in the runner, outside the process that judges it?"""
        return self.separate_candidate and self.candidate_source is not None and self.device == "cpu"

    @property
    def alone(self) -> bool:
        """Does the job need its device to itself: it times something, or its memory leaves no room for another?"""
        return self.timed or self.device_slots >= DEVICE_SLOTS


class CeilingsJob(BaseModel):
    """Measure the device's ceilings: copy bandwidth and matmul rates."""

    kind: Literal["ceilings"] = "ceilings"
    job_id: str = Field(default_factory=new_job_id)
    device: Device = "cuda"
    timeout_s: float = Field(300.0, gt=0)
    timed: ClassVar[bool] = True  # it measures the device
    alone: ClassVar[bool] = True  # its device to itself
    device_slots: ClassVar[int] = DEVICE_SLOTS


class ProfileJob(ProblemJob):
    """Profile one call of each contender under Nsight Compute: every kernel it launches, with its counters.

    No verdict: the candidate is not checked here (``kforge eval`` does that), only measured.
    """

    kind: Literal["profile"] = "profile"
    contenders: list[Contender] = Field(["eager", "candidate"], min_length=1)
    device: Literal["cuda"] = "cuda"
    seed: int = 0
    warmup: int = Field(3, ge=1, description="calls before the profiled one: compilation, autotuning, caches")
    ncu: str | None = Field(None, description="path of ncu where the job runs; None: PATH, then CUDA's folders")
    timeout_s: float = Field(900.0, gt=0)
    timed: ClassVar[bool] = True  # counters are per device: another job's kernels would land in them
    alone: ClassVar[bool] = True
    device_slots: ClassVar[int] = DEVICE_SLOTS

    @model_validator(mode="after")
    def _candidate_given(self) -> ProfileJob:
        if "candidate" in self.contenders and self.candidate_source is None:
            raise ValueError("profiling the candidate needs its source")
        if len(set(self.contenders)) != len(self.contenders):
            raise ValueError(f"contenders named twice: {self.contenders}")
        return self


AnyJob = EvalJob | CeilingsJob | ProfileJob
Job = Annotated[AnyJob, Field(discriminator="kind")]


class CheckResult(BaseModel):
    """One correctness check on one seeded input set."""

    seed: int
    passed: bool
    reason: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = Field(None, description="max |cand - ref| / max(|ref|, atol)")
    max_abs_error_vs_fp64: float | None = Field(None, description="candidate against the float64 reference")
    reference_abs_error_vs_fp64: float | None = Field(None, description="the reference itself against float64")


class CorrectnessReport(BaseModel):
    passed: bool
    policy: Policy
    atol: float
    rtol: float
    checks: list[CheckResult]
    parameters_copied: int = Field(0, description="reference parameters copied into ModelNew by name")

    def worst(self, field: str) -> float | None:
        values = [getattr(c, field) for c in self.checks if getattr(c, field) is not None]
        return max(values) if values else None


class TimingStats(BaseModel):
    """Statistics of one contender's per-call times, in milliseconds."""

    trials: int
    median_ms: float
    mean_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    std_ms: float
    host_median_ms: float | None = Field(
        None, description="median wall time the host spent inside the call (its Python and launches)"
    )

    @property
    def spread(self) -> float:
        """Interquartile range over the median: the relative noise of this measurement."""
        return self.iqr_ms / self.median_ms if self.median_ms else float("nan")


class TimingReport(BaseModel):
    method: Literal["cuda_events", "perf_counter"]
    input_sets: int = Field(description="distinct input sets: fresh values (same buffers) before every trial")
    flush_bytes: int = Field(description="bytes read (CUDA) or written (CPU) before each timed call to evict the cache")
    interleaved: bool = True
    launch_hidden: bool = Field(
        False, description="CUDA: the host's launch work was hidden behind a held stream (times are GPU work)"
    )
    stats: dict[str, TimingStats]
    paired: dict[str, float] = Field(
        {},
        description="\"a/b\": the median over trials of a's time over b's in the same trial (tools.timing."
        "paired_ratios); empty in reports saved before it was recorded",
    )
    intervals: dict[str, tuple[float, float]] = Field(
        {},
        description='"a/candidate": the 95% bootstrap interval of the paired ratio a/candidate, the candidate\'s '
        "speedup over a (tools.speed); empty without a candidate, and in reports saved before it was recorded",
    )
    seconds: float = Field(description="wall time of the whole timing phase")

    def interval(self, baseline: Contender, contender: Contender = "candidate") -> tuple[float, float] | None:
        """The interval of ``contender``'s speedup over ``baseline``, where one was recorded."""
        return self.intervals.get(f"{baseline}/{contender}")

    def medians_ratio(self, a: Contender, b: Contender) -> float | None:
        """a's median time over b's: what the paired ratio must agree with (tools.speed.verdict)."""
        if a not in self.stats or b not in self.stats or not self.stats[b].median_ms:
            return None
        return self.stats[a].median_ms / self.stats[b].median_ms

    def ratio(self, a: Contender, b: Contender) -> float | None:
        """a's time over b's: the paired per-trial median, or the ratio of the medians where none was recorded."""
        if a not in self.stats or b not in self.stats:
            return None
        return self.paired.get(f"{a}/{b}", self.stats[a].median_ms / self.stats[b].median_ms)

    def speedup(self, baseline: Contender, contender: Contender = "candidate") -> float | None:
        return self.ratio(baseline, contender)

    @property
    def best_reference(self) -> str | None:
        refs = [r for r in ("eager", "compile") if r in self.stats]
        if len(refs) == 2:
            return "compile" if self.ratio("compile", "eager") < 1.0 else "eager"  # type: ignore[operator]
        return refs[0] if refs else None

    @property
    def speedup_vs_best(self) -> float | None:
        best = self.best_reference
        return self.speedup(best) if best else None  # type: ignore[arg-type]


class Ceilings(BaseModel):
    """A device's measured ceilings; the roofline floor of every problem is computed from these."""

    device: Device
    device_name: str
    copy_bytes_per_s: float = Field(description="bytes read + bytes written per second, large copy")
    fp32_flops: float
    tf32_flops: float | None = None
    bf16_flops: float | None = None
    measured_at: str
    torch_version: str


class MemoryReport(BaseModel):
    """The memory an evaluation job used on its device, against one eager forward's (tools.memory)."""

    method: Literal["torch.cuda.max_memory_allocated", "rss"] = Field(
        description="CUDA: bytes torch allocated; CPU: the resident set's high-water mark above the job's start"
    )
    peak_bytes: int = Field(description="the job's peak, every buffer included (the timer's cache flush too)")
    eager_peak_bytes: int = Field(description="one eager forward: parameters, inputs, temporaries and output")
    plan_bytes: int = Field(description="the memory plan's peak, from the eager peak measured here")
    answers_on_device_bytes: int = Field(description="expected outputs kept on the device")
    answers_parked_bytes: int = Field(description="expected outputs kept off it: host memory (CUDA), a file (CPU)")
    peak_by_phase: dict[str, int] = Field(
        default_factory=dict, description="the job's peak so far at the end of each phase (sandbox.worker.Phases)"
    )

    @property
    def ratio(self) -> float | None:
        """The job's peak over one eager forward's."""
        return self.peak_bytes / self.eager_peak_bytes if self.eager_peak_bytes else None


class RuntimeFinding(BaseModel):
    """A trick the worker saw while the candidate ran (the dynamic anti-cheat checks)."""

    trick: str = Field(description="a name from tools.cheat_tricks.TRICKS")
    detail: str
    blocking: bool = Field(True, description="False: reported only (reduced precision under the relaxed policy)")

    def __str__(self) -> str:
        return f"{self.trick}: {self.detail}"


class JobResult(BaseModel):
    """The worker's verdict on one job."""

    job_id: str
    status: Status
    reason: str = Field("", description="one line: why this status")
    details: str = Field("", description="traceback or compiler log when there is one")
    compile: list[CompileReport] = []
    correctness: CorrectnessReport | None = None
    timing: TimingReport | None = None
    ceilings: Ceilings | None = None
    profile: ProfileReport | None = None
    findings: list[RuntimeFinding] = Field([], description="dynamic anti-cheat findings, blocking or not")
    warnings: list[str] = Field([], description="things a user should know: a degenerate problem, ...")
    phases: dict[str, float] = Field({}, description="seconds spent in each phase of the worker")
    memory: MemoryReport | None = Field(None, description="evaluation jobs: the memory they used (tools.memory)")
    environment: dict[str, str] = {}
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0
    exit_code: int | None = None
