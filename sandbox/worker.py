"""Run one job in this process: ``python -m sandbox.worker --job FILE --result-fd N``.

Order matters and is the point of this module. Before any candidate code exists in the process the
worker: reads its channel key from stdin, captures the clock functions (the timer), builds the
reference model, computes every expected output (and its float64 twin) on fresh seeded inputs,
prepares the timing input sets and compiles the ``torch.compile`` reference. Only then does it
compile and import the candidate, so a candidate that patches torch cannot change the expected
answers or the clock.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from pydantic import TypeAdapter
from torch import nn

from sandbox import profiling
from sandbox.channel import KEY_BYTES, make_sender
from sandbox.protocol import (
    AnyJob,
    CeilingsJob,
    CheckResult,
    CorrectnessReport,
    EvalJob,
    Job,
    JobResult,
    ProfileJob,
    RuntimeFinding,
    Status,
    TimingReport,
)
from tools import correctness, runtime_checks, timing
from tools.cheat_tricks import (
    CONSTANT_OUTPUT,
    HARD_CODED_SHAPE,
    INPUT_MUTATION,
    RESULT_CACHE,
    UNINITIALISED_MEMORY,
    library_family,
)
from tools.compile import CompileReport, check_candidate_cuda, map_c_log_to_candidate
from tools.device import cpu_name
from tools.errors import CompileError, ProblemError
from tools.problem import build_model, copy_parameters, exec_source, import_source, make_inputs
from tools.runtime_checks import AuditWatch, HarnessSnapshot, OpRecorder

OUTPUT_LIMIT_BYTES = 256 << 20  # a candidate flooding stdout or disk is killed by SIGXFSZ


class JobFailed(Exception):
    """Ends a job early with a status; raised by the phases below, turned into a JobResult."""

    def __init__(self, status: Status, reason: str, details: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.details = status, reason, details


def classify(exc: BaseException) -> Status:
    """Map an exception raised by candidate code to a status."""
    name = type(exc).__name__
    if isinstance(exc, CompileError | SyntaxError) or name in {"CompileException", "NVRTCError"}:
        return "compile_error"
    if "Error building extension" in str(exc):  # torch.utils.cpp_extension.load_inline
        return "compile_error"
    return "runtime_error"


def describe(exc: BaseException) -> str:
    oom = isinstance(exc, torch.OutOfMemoryError | MemoryError) or type(exc).__name__ == "OutOfMemoryError"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{'out of memory: ' if oom else ''}{type(exc).__name__}: {text}"[:500]


@contextlib.contextmanager
def candidate_code(phase: str) -> Iterator[None]:
    """Run candidate code; any exception becomes a JobFailed naming the phase."""
    try:
        yield
    except JobFailed:
        raise
    except BaseException as exc:  # SystemExit or KeyboardInterrupt raised by a candidate count too
        if isinstance(exc, CompileError):
            raise _compile_failure(exc, phase) from exc
        raise JobFailed(classify(exc), f"{phase}: {describe(exc)}", traceback.format_exc()) from exc


_candidate: dict[str, str] = {}  # the job's candidate source and file name, for compile-error lines


def _compile_failure(exc: CompileError, phase: str) -> JobFailed:
    """A C compile error, its lines re-pointed at the candidate file when the C source is a literal of it."""
    mapped = None
    if exc.source and _candidate:
        mapped = map_c_log_to_candidate(exc.log, exc.source, _candidate["source"], _candidate["name"])
    if mapped is None:
        return JobFailed("compile_error", f"{phase}: {describe(exc)}", exc.log or traceback.format_exc())
    log, diagnostics = mapped
    first = diagnostics[0] if diagnostics else None
    where = f" at line {first.line}: {first.message}" if first else ""
    return JobFailed("compile_error", f"{phase}: C compiler{where}", log)


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 4)


def environment(device: torch.device) -> dict[str, str]:
    env = {"python": platform.python_version(), "torch": torch.__version__, "host": platform.node()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = str(torch.version.cuda)
        cap = torch.cuda.get_device_capability(device)
        env["arch"] = f"sm_{cap[0]}{cap[1]}"
    else:
        env["cpu"] = cpu_name()
        env["threads"] = str(torch.get_num_threads())
    return env


def _fp64_reference(ref: nn.Module, inputs: list[Any]) -> tuple[list[torch.Tensor] | None, str]:
    try:
        ref64 = copy.deepcopy(ref).double()
        with torch.no_grad():
            return [o.detach() for o in correctness.flatten_outputs(ref64(*correctness.to_float64(inputs)))], ""
    except Exception as exc:  # reported in the result; the float64 error column then stays empty
        return None, f"float64 reference unavailable: {describe(exc)}"


class Reference:
    """Everything computed before candidate code exists: the model, expected answers, timing inputs."""

    def __init__(self, job: EvalJob, device: torch.device, phases: Phases) -> None:
        self.notes: list[str] = []
        with phases("reference"):
            try:
                self.module = exec_source(job.problem_source, job.problem_name, "problem")
            except ProblemError as exc:
                raise JobFailed("runtime_error", f"problem: {exc}") from exc
            # The timer captures the clock functions: built before any candidate code is imported.
            self.timer = timing.make_timer(device, hide_launch=job.timing.hide_launch)
            self.init = list(self.module.get_init_inputs())
            self.model = build_model(self.module.Model, self.init, device, job.seed)
            self.recorder = OpRecorder()
            self.expected = [self._expected(job, device, i) for i in range(job.n_checks)]
            self.atol, self.rtol = correctness.tolerance(job.policy, self.expected[0][2][0].dtype)
            self.warnings = runtime_checks.degenerate_warnings(self.expected[0][2], job.policy)
            self.variant = self._shape_variant(job, device)
            self.timing_inputs = make_inputs(self.module.get_inputs, device, 2_000_000_007)
            fresh = lambda k: make_inputs(self.module.get_inputs, device, 2_000_000_011 + k)  # noqa: E731
            self.refresh = timing.refresher(fresh, self.timing_inputs)
            self.contenders: dict[str, Callable[..., Any]] = {}
            if "eager" in job.references:
                self.contenders["eager"] = self.model
            if "compile" in job.references:
                compiled = torch.compile(self.model)
                with torch.no_grad():
                    compiled(*self.timing_inputs)  # compile now, while torch is still pristine
                self.contenders["compile"] = compiled

    def _expected(self, job: EvalJob, device: torch.device, i: int) -> Expected:
        seed = job.seed * 1_000_003 + i + 1
        inputs = make_inputs(self.module.get_inputs, device, seed)
        with torch.no_grad(), self.recorder if i == 0 else contextlib.nullcontext():
            raw = correctness.flatten_outputs(self.model(*inputs))
        outs = [o.detach().clone() for o in raw]
        runtime_checks.poison_tensors(raw)  # a candidate must not find this answer in freed memory
        outs64, note = _fp64_reference(self.model, inputs)
        if note and note not in self.notes:
            self.notes.append(note)
        return seed, inputs, outs, outs64

    def _shape_variant(self, job: EvalJob, device: torch.device) -> tuple[str, list[Any], list[torch.Tensor]] | None:
        """Inputs of a second valid shape and their answers, or None (with a note) where there is none."""
        variant = runtime_checks.shape_variant(job.problem_source, self.module)
        if not variant:
            self.notes.append("second-shape check skipped: no size constant that only get_inputs() reads")
            return None
        described = ", ".join(f"{k} {getattr(self.module, k)}→{v}" for k, v in variant.items())
        try:
            with runtime_checks.patched_constants(self.module, variant), torch.no_grad():
                inputs = make_inputs(self.module.get_inputs, device, job.seed * 1_000_003 + 99)
                raw = correctness.flatten_outputs(self.model(*inputs))
        except Exception as exc:  # the problem does not allow that shape: the check does not apply
            self.notes.append(f"second-shape check skipped: the reference fails with {described}: {describe(exc)}")
            return None
        outs = [o.detach().clone() for o in raw]
        runtime_checks.poison_tensors(raw)
        return described, inputs, outs


Expected = tuple[int, list[Any], list[torch.Tensor], list[torch.Tensor] | None]


class Rejected(Exception):
    """A blocking anti-cheat finding: the job ends with status ``rejected``."""

    def __init__(self, findings: list[RuntimeFinding]) -> None:
        super().__init__(str(findings[0]))
        self.findings = findings


class CandidateRun:
    """Runs the candidate under watch: correctness checks, then the anti-cheat probes."""

    def __init__(self, job: EvalJob, device: torch.device, ref: Reference, candidate: nn.Module, watch: Watch) -> None:
        self.job, self.device, self.ref, self.candidate, self.watch = job, device, ref, candidate, watch
        self.findings: list[RuntimeFinding] = []
        self.ops = OpRecorder()
        self.library: str | None = None  # set when it ran an allowed heavy op in the library (said in the result)
        self._previous: list[torch.Tensor] = []  # the last call's outputs, held so their memory stays theirs
        # Every input buffer a call has seen, held to the end: a new buffer then never reuses an old
        # one's address, so only the replay check (same buffer, new values) can hit a pointer-keyed cache.
        self._seen_inputs: list[list[Any]] = []

    def note(self, found: list[RuntimeFinding]) -> None:
        self.findings += [f for f in found if str(f) not in {str(g) for g in self.findings}]
        if any(f.blocking for f in found):
            raise Rejected([f for f in self.findings if f.blocking])

    def call(self, inputs: list[Any], what: str, poison_value: float = float("nan")) -> list[Any]:
        """One watched call on ``inputs`` after poisoning freed memory; its flattened outputs."""
        self._seen_inputs.append(inputs)
        recorder = OpRecorder()

        def recorded(*args: Any) -> Any:
            # Only the candidate's own call is recorded, not the watch's snapshot and comparison around it: the
            # library exemption (cheat_tricks.library_family) reads every op the candidate ran in torch.
            with recorder:
                return self.candidate(*args)

        poisoned = runtime_checks.poisoned(self.device, self.ref.expected[0][2], poison_value)
        with poisoned, candidate_code(what), torch.no_grad(), self.watch.audit.on():
            out, found = runtime_checks.watch_call(
                recorded, inputs, self.device, self.ref.timer.synchronize, self.watch.threads, self.watch.children
            )
        self.ops.ops.update(recorder.ops)
        self.ops.low_dtypes.update(recorder.low_dtypes)
        self.note(found)
        outs = correctness.flatten_outputs(out)
        reused = {t.untyped_storage().data_ptr() for t in self._previous} & {
            t.untyped_storage().data_ptr() for t in outs if isinstance(t, torch.Tensor) and t.numel()
        }
        if reused:
            self.note([runtime_checks.finding(RESULT_CACHE, "returned the same output memory as its previous call")])
        self._previous = [t for t in outs if isinstance(t, torch.Tensor)]
        return outs

    def check(self) -> list[CheckResult]:
        checks = []
        for seed, inputs, outs, outs64 in self.ref.expected:
            used = correctness.clone_inputs(inputs)
            actual = self.call(used, f"running the candidate (seed {seed})")
            check = correctness.compare(actual, outs, outs64, self.job.policy, seed)
            changed = correctness.mutated_inputs(inputs, used)
            if changed:
                self.note([runtime_checks.finding(INPUT_MUTATION, f"modified input(s) {changed} (seed {seed})")])
            if not check.passed and all(c.passed for c in checks):
                self.diagnose_failure(inputs, outs)
            elif check.passed:
                if not checks:  # the layout is the candidate's, not the seed's: said once
                    self.ref.warnings += correctness.layout_differences(actual, outs)
                for a, e in zip(actual, outs, strict=True):
                    why = runtime_checks.constant_output(a, e, *correctness.tolerance(self.job.policy, e.dtype))
                    if why:
                        self.note([runtime_checks.finding(CONSTANT_OUTPUT, why)])
            checks.append(check)
        return checks

    def diagnose_failure(self, inputs: list[Any], outs: list[torch.Tensor], poison_value: float = float("nan")) -> None:
        """Name the cause of a wrong answer where a rerun can tell it.

        Right on the same values in new buffers, freed memory poisoned as for the failed call (every old
        buffer still held, so no pointer repeats): an answer replayed from an earlier call. Wrong again, but
        right when freed memory holds the reference's answer: a read of memory it never wrote (the
        reference's freed output, most often). The poison must be the failed call's: an fmax-style read
        that a huge value broke would pass under a NaN, and a changed poison would pass for a replay.
        """
        if self._rerun_passes(inputs, outs, lambda: runtime_checks.poisoned(self.device, outs, poison_value)):
            why = "wrong on inputs in buffers it had seen before, right on the same values in new buffers"
            self.note([runtime_checks.finding(RESULT_CACHE, why)])
        if self._rerun_passes(inputs, outs, lambda: runtime_checks.primed(self.device, outs)):
            why = "wrong when freed memory is poisoned, right when it holds the reference's answer"
            self.note([runtime_checks.finding(UNINITIALISED_MEMORY, why + ": the output is memory it never wrote")])

    def _rerun_passes(
        self, inputs: list[Any], outs: list[torch.Tensor], memory: Callable[[], AbstractContextManager[None]]
    ) -> bool:
        """Run on a new copy of ``inputs`` with freed memory as ``memory()`` leaves it (poisoned or primed); pass?"""
        fresh = correctness.clone_inputs(inputs)
        self._seen_inputs.append(fresh)
        with memory():
            try:
                with self.watch.audit.on(), torch.no_grad():
                    actual = correctness.flatten_outputs(self.candidate(*fresh))
            except Exception as exc:  # the first failure stands; a rerun only names its cause when it can
                self.ref.notes.append(f"diagnosis rerun raised {describe(exc)}")
                return False
        return correctness.compare(actual, outs, None, self.job.policy, -1).passed

    def probe(self) -> None:
        """The checks that need a candidate already known to be correct."""
        job, ref = self.job, self.ref
        seed, inputs, outs, _ = ref.expected[0]
        # Poisoned with a huge finite value this time: fmax-style reads can hide a NaN poison.
        used = correctness.clone_inputs(inputs)
        again = self.call(used, "running the candidate again", poison_value=1e30)
        if not correctness.compare(again, outs, None, job.policy, seed).passed:
            self.diagnose_failure(inputs, outs, poison_value=1e30)  # a replayed answer, or memory it never wrote
            self.note([runtime_checks.finding(UNINITIALISED_MEMORY, "the answer changed with what freed memory held")])
        if len(ref.expected) > 1:
            # Same buffers the candidate has seen, new values: a cache keyed by pointer or id replays.
            buffers = correctness.clone_inputs(inputs)
            self.call(buffers, "running the candidate (replay check)")
            _, inputs2, outs2, _ = ref.expected[1]
            for buf, new in zip(buffers, inputs2, strict=True):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)
            replay = self.call(buffers, "running the candidate (replay check)")
            if not correctness.compare(replay, outs2, None, job.policy, -1).passed:
                self.note(
                    [
                        runtime_checks.finding(
                            RESULT_CACHE, "new values in a buffer it had already seen got the old buffer's answer"
                        )
                    ]
                )
        if ref.variant is not None:
            described, inputs3, outs3 = ref.variant
            try:
                other = self.call(correctness.clone_inputs(inputs3), "running the candidate (second shape)")
            except JobFailed as failed:
                self.note([runtime_checks.finding(HARD_CODED_SHAPE, f"fails with {described}: {failed.reason}")])
            else:
                check = correctness.compare(other, outs3, None, job.policy, -1)
                if not check.passed:
                    self.note([runtime_checks.finding(HARD_CODED_SHAPE, f"wrong with {described}: {check.reason}")])
        if self.device.type == "cuda":
            used = correctness.clone_inputs(inputs)
            with candidate_code("running the candidate (stream check)"), torch.no_grad(), self.watch.audit.on():
                streams, current = runtime_checks.kernel_streams(lambda: self.candidate(*used), self.device)
            self.note(runtime_checks.stream_findings(streams, current))
        library = library_family(ref.recorder.ops)  # a heavy op + pointwise tail problem: see cheat_tricks
        self.note(
            runtime_checks.op_findings(
                self.ops, ref.recorder.heavy_families(), bool(ref.recorder.low_dtypes), job.policy, library
            )
        )
        self.library = runtime_checks.library_note(self.ops, library, self.device)
        if self.library:
            ref.warnings.append(self.library)
        self.note(self.watch.changes())


class Watch:
    """The pristine harness, recorded before the candidate is imported; ``changes`` compares to it."""

    def __init__(self, device: torch.device, candidate_file: str) -> None:
        self.device = device
        self.snapshot = HarnessSnapshot(device)
        self.audit = AuditWatch(candidate_file)
        self.threads = set(threading.enumerate())
        # torch.compile's reference starts a pool of compile workers on a many-core host: the harness's own.
        self.children = frozenset(runtime_checks.child_processes())
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self.l2 = runtime_checks.l2_state(self.stream) if self.stream is not None else None

    def changes(self) -> list[RuntimeFinding]:
        found = self.snapshot.changes() + self.audit.findings
        if self.stream is not None and self.l2 is not None:
            found += runtime_checks.l2_findings(self.l2, runtime_checks.l2_state(self.stream))
        return found


def _result(job: EvalJob, status: Status, reason: str, ref: Reference, phases: Phases, **fields: Any) -> JobResult:
    return JobResult(
        job_id=job.job_id,
        status=status,
        reason=reason,
        details="\n".join(ref.notes),
        warnings=ref.warnings,
        phases=phases.seconds,
        **fields,
    )


def _compile_check(job: EvalJob, env: dict[str, str], phases: Phases) -> list[CompileReport]:
    with phases("compile_check"):
        arch = job.arch or env["arch"] + ("a" if env["arch"] == "sm_90" else "")
        reports = check_candidate_cuda(job.candidate_source or "", arch=arch, filename=job.candidate_name)
    failed = [r for r in reports if not r.ok]
    if failed:
        first = failed[0].diagnostics[0] if failed[0].diagnostics else None
        where = f" at line {first.line}: {first.message}" if first else ""
        raise JobFailed("compile_error", f"NVRTC{where}", failed[0].log)
    return reports


def run_eval(job: EvalJob, phases: Phases) -> JobResult:
    device = torch.device(job.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise JobFailed("runtime_error", "no CUDA device is visible to the worker")
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    env = environment(device)
    ref = Reference(job, device, phases)
    contenders = dict(ref.contenders)
    common: dict[str, Any] = {"environment": env}
    run = None
    if job.candidate_source is not None:
        _candidate.update(source=job.candidate_source, name=job.candidate_name)
        if device.type == "cuda":
            common["compile"] = _compile_check(job, env, phases)
        watch = Watch(device, job.candidate_name)
        try:
            with phases("import"), candidate_code("importing the candidate"), watch.audit.on():
                cand_module = import_source(job.candidate_source, job.candidate_name, "candidate")
                model_cls = getattr(cand_module, "ModelNew", None)
                if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
                    raise JobFailed("runtime_error", "the candidate defines no `ModelNew` nn.Module subclass")
                candidate = build_model(model_cls, ref.init, device, job.seed)
                copied = copy_parameters(ref.model, candidate)
            run = CandidateRun(job, device, ref, candidate, watch)
            run.note(watch.changes() + runtime_checks.inherited_reference(model_cls, ref.module.Model))
            with phases("correctness"):
                checks = run.check()
            common["correctness"] = CorrectnessReport(
                passed=all(c.passed for c in checks),
                policy=job.policy,
                atol=ref.atol,
                rtol=ref.rtol,
                checks=checks,
                parameters_copied=copied,
            )
            if not common["correctness"].passed:
                run.note(watch.changes())  # a wrong answer from a candidate caught cheating: name the trick
                first_bad = next(c for c in checks if not c.passed)
                return _result(
                    job,
                    "incorrect",
                    f"seed {first_bad.seed}: {first_bad.reason}",
                    ref,
                    phases,
                    findings=run.findings,
                    **common,
                )
            with phases("anti_cheat"):
                run.probe()
        except JobFailed:
            found = [f for f in watch.changes() if f.blocking]
            if not found:
                raise
            # The exception came after a trick the watch saw (a frame read that found nothing, say).
            watch.snapshot.restore_switches()
            return _result(job, "rejected", str(found[0]), ref, phases, findings=found, **common)
        except Rejected as rejected:
            watch.snapshot.restore_switches()
            return _result(
                job,
                "rejected",
                str(rejected.findings[0]),
                ref,
                phases,
                findings=run.findings if run else rejected.findings,
                **common,
            )
        contenders["candidate"] = candidate

    timing_report = None
    if job.time_candidate and contenders:
        with phases("timing"), candidate_code("timing the candidate"):
            audit = run.watch.audit.on() if run else contextlib.nullcontext()
            with audit:
                stats, paired, last, trials, seconds = timing.time_interleaved(
                    contenders, ref.timing_inputs, ref.refresh, ref.timer, job.timing, job.seed
                )
        timing_report = TimingReport(
            method=ref.timer.method,  # type: ignore[arg-type]
            input_sets=trials,
            flush_bytes=ref.timer.flush_bytes if job.timing.flush_cache else 0,
            launch_hidden=device.type == "cuda" and job.timing.hide_launch,
            stats=stats,
            paired=paired,
            seconds=round(seconds, 4),
        )
        common["timing"] = timing_report
        if run is not None:
            try:
                run.note(run.watch.changes())
                if "eager" in last:
                    # The last timed call's output must be a real answer for the inputs it was given.
                    check = correctness.compare(
                        last["candidate"], correctness.flatten_outputs(last["eager"]), None, job.policy, -1
                    )
                    if not check.passed:
                        run.note(
                            [
                                runtime_checks.finding(
                                    RESULT_CACHE,
                                    f"a timed call returned a wrong answer for its inputs ({check.reason})",
                                )
                            ]
                        )
            except Rejected as rejected:
                return _result(job, "rejected", str(rejected.findings[0]), ref, phases, findings=run.findings, **common)
    reason = "correct on every check" if run else "reference timed"
    if run is not None and run.library:
        reason += f"; {run.library.split(' (')[0]}"  # "; heavy op by the library: cuBLAS"
    return _result(job, "ok", reason, ref, phases, findings=run.findings if run else [], **common)


def run_profile(job: ProfileJob, phases: Phases) -> JobResult:
    try:
        with phases("profile"):
            report = profiling.profile(job, torch.cuda.is_available())
    except profiling.ProfileFailed as failed:
        raise JobFailed(failed.status, failed.reason, failed.details) from failed
    return JobResult(
        job_id=job.job_id,
        status="ok",
        reason="profiled " + ", ".join(job.contenders),
        profile=report,
        phases=phases.seconds,
        environment=environment(torch.device("cuda", torch.cuda.current_device())),
    )


def run_job(job: AnyJob) -> JobResult:
    phases = Phases()
    try:
        if isinstance(job, CeilingsJob):
            from tools.roofline import measure_ceilings

            with phases("ceilings"):
                ceilings = measure_ceilings(job.device)
            return JobResult(
                job_id=job.job_id, status="ok", reason="ceilings measured", ceilings=ceilings, phases=phases.seconds
            )
        if isinstance(job, ProfileJob):
            return run_profile(job, phases)
        return run_eval(job, phases)
    except JobFailed as failed:
        return JobResult(
            job_id=job.job_id, status=failed.status, reason=failed.reason, details=failed.details, phases=phases.seconds
        )


def _read_key() -> bytes:
    """Exactly KEY_BYTES from stdin: the orchestrator need not close the pipe (a container exec can't)."""
    key = b""
    while len(key) < KEY_BYTES:
        chunk = os.read(0, KEY_BYTES - len(key))
        if not chunk:
            raise SystemExit("the orchestrator sent no channel key")
        key += chunk
    return key


def _enter_scratch() -> None:
    """Work in $HOME, the job's private scratch folder (made here when the backend could not)."""
    home = os.environ.get("HOME")
    if home:
        os.makedirs(os.path.join(home, "tmp"), mode=0o700, exist_ok=True)
        os.chdir(home)


def _limit_resources() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.worker", description=__doc__)
    parser.add_argument("--job", required=True, type=Path, help="JSON file holding the job")
    parser.add_argument(
        "--result-fd", required=True, type=int, help="inherited pipe for the signed verdict (1: this stdout)"
    )
    args = parser.parse_args(argv)
    key = _read_key()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    result_fd = args.result_fd
    if result_fd == 1:
        # A container exec has no pipe but stdout: keep that one for the verdict and send everything
        # printed (the candidate's output included) to stderr.
        result_fd = os.dup(1)
        os.dup2(2, 1)
    send = make_sender(result_fd, key)
    del key
    _enter_scratch()
    _limit_resources()
    job: AnyJob = TypeAdapter(Job).validate_json(args.job.read_text())
    started = time.perf_counter()
    try:
        result = run_job(job)
    except BaseException as exc:  # a harness failure is reported as the job's verdict, with its traceback
        result = JobResult(
            job_id=job.job_id,
            status="crashed",
            reason=f"the worker failed: {describe(exc)}",
            details=traceback.format_exc(),
        )
    result.wall_s = round(time.perf_counter() - started, 4)
    send(result.model_dump_json().encode())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate threads, atexit hooks or a broken CUDA context must not
    # hang or alter an exit that comes after the verdict.
    os._exit(0)


if __name__ == "__main__":
    main()
