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
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import TypeAdapter
from torch import nn

from sandbox.channel import make_sender
from sandbox.protocol import (
    CeilingsJob,
    CheckResult,
    CorrectnessReport,
    EvalJob,
    Job,
    JobResult,
    Status,
    TimingReport,
)
from tools import correctness, timing
from tools.compile import check_candidate_cuda, map_c_log_to_candidate
from tools.device import cpu_name
from tools.errors import CompileError, ProblemError
from tools.problem import build_model, exec_source, import_source, make_inputs

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


def _copy_parameters(reference: nn.Module, candidate: nn.Module) -> int:
    """Copy reference weights into the candidate wherever name and shape match; return how many."""
    theirs = candidate.state_dict()
    copied = 0
    with torch.no_grad():
        for name, value in reference.state_dict().items():
            if name in theirs and theirs[name].shape == value.shape:
                theirs[name].copy_(value)
                copied += 1
    return copied


def _fp64_reference(ref: nn.Module, inputs: list[Any]) -> tuple[list[torch.Tensor] | None, str]:
    try:
        ref64 = copy.deepcopy(ref).double()
        with torch.no_grad():
            return [o.detach() for o in correctness.flatten_outputs(ref64(*correctness.to_float64(inputs)))], ""
    except Exception as exc:  # reported in the result; the float64 error column then stays empty
        return None, f"float64 reference unavailable: {describe(exc)}"


def run_eval(job: EvalJob, phases: Phases) -> JobResult:
    device = torch.device(job.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise JobFailed("runtime_error", "no CUDA device is visible to the worker")
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    env = environment(device)
    notes: list[str] = []

    with phases("reference"):
        try:
            module = exec_source(job.problem_source, job.problem_name, "problem")
        except ProblemError as exc:
            raise JobFailed("runtime_error", f"problem: {exc}") from exc
        timer = timing.make_timer(device)  # captures the clock functions: before candidate code
        init = list(module.get_init_inputs())
        ref = build_model(module.Model, init, device, job.seed)
        expected: list[tuple[int, list[Any], list[torch.Tensor], list[torch.Tensor] | None]] = []
        for i in range(job.n_checks):
            seed = job.seed * 1_000_003 + i + 1
            inputs = make_inputs(module.get_inputs, device, seed)
            with torch.no_grad():
                outs = [o.detach().clone() for o in correctness.flatten_outputs(ref(*inputs))]
            outs64, note = _fp64_reference(ref, inputs)
            if note and note not in notes:
                notes.append(note)
            expected.append((seed, inputs, outs, outs64))
        input_bytes = sum(x.numel() * x.element_size() for x in expected[0][1] if isinstance(x, torch.Tensor))
        n_sets = timing.input_set_count(input_bytes, job.timing)
        timing_inputs = [make_inputs(module.get_inputs, device, 2_000_000_007 + j) for j in range(n_sets)]
        contenders: dict[str, Callable[..., Any]] = {}
        if "eager" in job.references:
            contenders["eager"] = ref
        if "compile" in job.references:
            compiled = torch.compile(ref)
            with torch.no_grad():
                compiled(*timing_inputs[0])  # compile now, while torch is still pristine
            contenders["compile"] = compiled

    compile_reports = []
    copied = 0
    if job.candidate_source is not None:
        _candidate.update(source=job.candidate_source, name=job.candidate_name)
        if device.type == "cuda":
            with phases("compile_check"):
                arch = job.arch or env["arch"] + ("a" if env["arch"] == "sm_90" else "")
                compile_reports = check_candidate_cuda(job.candidate_source, arch=arch, filename=job.candidate_name)
            failed = [r for r in compile_reports if not r.ok]
            if failed:
                first = failed[0].diagnostics[0] if failed[0].diagnostics else None
                where = f" at line {first.line}: {first.message}" if first else ""
                raise JobFailed("compile_error", f"NVRTC{where}", failed[0].log)

        with phases("import"), candidate_code("importing the candidate"):
            cand_module = import_source(job.candidate_source, job.candidate_name, "candidate")
            model_cls = getattr(cand_module, "ModelNew", None)
            if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
                raise JobFailed("runtime_error", "the candidate defines no `ModelNew` nn.Module subclass")
            candidate = build_model(model_cls, init, device, job.seed)
            copied = _copy_parameters(ref, candidate)

        with phases("correctness"):
            checks = []
            for seed, inputs, outs, outs64 in expected:
                used = correctness.clone_inputs(inputs)
                with candidate_code(f"running the candidate (seed {seed})"), torch.no_grad():
                    actual = candidate(*used)
                    timer.synchronize()
                check = correctness.compare(actual, outs, outs64, job.policy, seed)
                changed = correctness.mutated_inputs(inputs, used)
                if check.passed and changed:
                    check = CheckResult(seed=seed, passed=False, reason=f"the candidate modified input(s) {changed}")
                checks.append(check)
            report = CorrectnessReport(
                passed=all(c.passed for c in checks),
                policy=job.policy,
                atol=correctness.tolerance(job.policy, expected[0][2][0].dtype)[0],
                rtol=correctness.tolerance(job.policy, expected[0][2][0].dtype)[1],
                checks=checks,
                parameters_copied=copied,
            )
        if not report.passed:
            first_bad = next(c for c in checks if not c.passed)
            return JobResult(
                job_id=job.job_id,
                status="incorrect",
                reason=f"seed {first_bad.seed}: {first_bad.reason}",
                details="\n".join(notes),
                compile=compile_reports,
                correctness=report,
                phases=phases.seconds,
                environment=env,
            )
        contenders["candidate"] = candidate
    else:
        report = None

    timing_report = None
    if job.time_candidate and contenders:
        with phases("timing"), candidate_code("timing the candidate"):
            stats, last, seconds = timing.time_interleaved(contenders, timing_inputs, timer, job.timing, job.seed)
        timing_report = TimingReport(
            method=timer.method,  # type: ignore[arg-type]
            input_sets=n_sets,
            flush_bytes=timer.flush_bytes if job.timing.flush_cache else 0,
            stats=stats,
            seconds=round(seconds, 4),
        )
        if "candidate" in last and "eager" in last:
            # The last timed call's output must be a real answer for the inputs it was given.
            set_index, out = last["candidate"]
            ref_index, ref_out = last["eager"]
            assert set_index == ref_index
            check = correctness.compare(out, correctness.flatten_outputs(ref_out), None, job.policy, -1)
            if not check.passed:
                return JobResult(
                    job_id=job.job_id,
                    status="incorrect",
                    reason=f"a timed call returned a wrong result ({check.reason}): results reused across calls?",
                    compile=compile_reports,
                    correctness=report,
                    timing=timing_report,
                    phases=phases.seconds,
                    environment=env,
                )
    return JobResult(
        job_id=job.job_id,
        status="ok",
        reason="correct on every check" if report else "reference timed",
        details="\n".join(notes),
        compile=compile_reports,
        correctness=report,
        timing=timing_report,
        phases=phases.seconds,
        environment=env,
    )


def run_job(job: EvalJob | CeilingsJob) -> JobResult:
    phases = Phases()
    try:
        if isinstance(job, CeilingsJob):
            from tools.roofline import measure_ceilings

            with phases("ceilings"):
                ceilings = measure_ceilings(job.device)
            return JobResult(
                job_id=job.job_id, status="ok", reason="ceilings measured", ceilings=ceilings, phases=phases.seconds
            )
        return run_eval(job, phases)
    except JobFailed as failed:
        return JobResult(
            job_id=job.job_id, status=failed.status, reason=failed.reason, details=failed.details, phases=phases.seconds
        )


def _limit_resources() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.worker", description=__doc__)
    parser.add_argument("--job", required=True, type=Path, help="JSON file holding the job")
    parser.add_argument("--result-fd", required=True, type=int, help="inherited pipe for the signed verdict")
    args = parser.parse_args(argv)
    key = sys.stdin.buffer.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    send = make_sender(args.result_fd, key)
    del key
    _limit_resources()
    job: EvalJob | CeilingsJob = TypeAdapter(Job).validate_json(args.job.read_text())
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
