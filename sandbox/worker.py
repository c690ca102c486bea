"""Run one job: ``python -m sandbox.worker --job FILE --result-fd N``. This process is the job's judge.

A CPU job's candidate runs in a process of its own, the runner (``sandbox.runner``), forked first thing, before the
channel's key is read and before anything of the job exists; the judge never imports, calls or unpickles anything of
the candidate's. It reads its channel key, captures the clock functions (the timer), builds the reference model,
computes every expected output (and its float64 twin) on fresh seeded inputs, prepares the timing input sets and
compiles the ``torch.compile`` reference; then has the runner build the candidate and call it, compares what comes
back with its own answers and times the calls with its own clock.

Where the candidate still runs in this process (CUDA jobs, until the runner is verified on a GPU) order is the
guarantee: all of the above comes before the candidate is compiled and imported, so a candidate that patches torch
cannot change the expected answers or the clock.
"""

from __future__ import annotations

import argparse
import contextlib
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

from sandbox import contain, profiling
from sandbox.candidate import CandidateSide, Memory, limit_output
from sandbox.channel import KEY_BYTES, make_sender
from sandbox.failures import JobFailed, candidate_code, describe, set_candidate
from sandbox.runner import RemoteSide, RoundTripTimer, Runner
from tools import correctness, runtime_checks, timing
from tools.answers import AnswerStore, to_host
from tools.cheat_tricks import (
    CONSTANT_OUTPUT,
    GLOBAL_STATE,
    HARD_CODED_SHAPE,
    INPUT_MUTATION,
    RESULT_CACHE,
    UNINITIALISED_MEMORY,
    library_family,
)
from tools.compile import CompileReport, check_candidate_cuda
from tools.device import cpu_name, hardware_facts
from tools.errors import ProblemError
from tools.memory import PeakMeter, Plan, chunk_elements, make_plan, memory_cap, return_freed, tensor_bytes
from tools.problem import build_model, exec_source, make_inputs
from tools.protocol import (
    AnyJob,
    CeilingsJob,
    CheckResult,
    CorrectnessReport,
    EvalJob,
    Job,
    JobResult,
    MemoryReport,
    ProfileJob,
    RuntimeFinding,
    Status,
    TimingReport,
)
from tools.runtime_checks import OpRecorder


class Phases:
    """Each phase's seconds and, once a meter is attached, the job's peak memory at its end: the first phase whose
    peak exceeds the plan is where the excess was allocated."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.peaks: dict[str, int] = {}
        self.meter: PeakMeter | None = None

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 4)
            self.mark(name)

    def mark(self, name: str) -> None:
        """The job's peak so far, under ``name``: a point inside a phase, or a phase's end."""
        if self.meter is not None:
            self.peaks[name] = self.meter.job_peak()


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
    env.update(hardware_facts(device))  # the hardware sheet the LLM roles are given (agents.hardware)
    if contain.ENV in os.environ:
        env["containment"] = os.environ[contain.ENV]
    if contain.LIMITED in os.environ:
        env["limits"] = os.environ[contain.LIMITED]
    return env


@contextlib.contextmanager
def _in_float64(model: nn.Module, device: torch.device, room: int) -> Iterator[None]:
    """The model's floating parameters and buffers as float64 inside, where no more than ``room`` bytes beyond what
    is held now may be taken (``tools.memory.memory_cap``); each back in its own dtype after, outside that cap: the
    float64 run may have used the room up, and undoing the conversion must not fail for want of it (a half-restored
    model is then float64 in one layer and float32 in the next, and every later call of it fails)."""
    dtypes = {name: t.dtype for name, t in [*model.named_parameters(), *model.named_buffers()]}
    try:
        with memory_cap(device, room):
            model.double()  # inside the try: a conversion that runs out of memory half way is undone too
            yield
    finally:
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.dtype != dtypes[name]:
                t.data = t.data.to(dtypes[name])


def _aliases(t: torch.Tensor, held: list[Any]) -> bool:
    """Does ``t`` share memory with one of ``held`` (an input, a parameter)?"""
    ptr = t.untyped_storage().data_ptr()
    return any(isinstance(h, torch.Tensor) and h.untyped_storage().data_ptr() == ptr for h in held)


def _own(outs: list[Any], held: list[Any]) -> list[Any]:
    """The reference's outputs as answers the worker owns: a copy only of one that aliases an input or a parameter
    (the worker later poisons answers it drops)."""
    return [o.detach().clone() if isinstance(o, torch.Tensor) and _aliases(o, held) else o for o in outs]


class Reference:
    """Everything computed before candidate code exists: the model, every check's answer, the timing inputs.

    Inputs are never held per check: a check's inputs are made again from its seed when they are needed (their
    fingerprints, taken now, show that they came out the same), into the one input set ``buffers``, which the
    timing trials refill too. Answers go to an ``AnswerStore`` sized by the memory plan (``tools.memory``).
    """

    def __init__(self, job: EvalJob, device: torch.device, phases: Phases, meter: PeakMeter) -> None:
        self.job, self.device, self.meter, self.phases = job, device, meter, phases
        self.notes: list[str] = []
        self.memory: dict[str, int] = {}
        checking = job.candidate_source is not None
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
            self.seeds = [job.seed * 1_000_003 + i + 1 for i in range(job.n_checks if checking else 1)]
            with meter.window(self.memory, "make_peak", since=meter.current()):
                inputs = self.make(self.seeds[0])
            phases.mark("reference: inputs")
            first = self._eager_peak(inputs)
            phases.mark("reference: one eager call")
            self.plan = self._plan(inputs, first, checking)
            self.chunk = chunk_elements(self.plan.eager_peak, device.type)
            self.prints = [correctness.fingerprints(inputs, self.chunk)]
            self.like = [torch.empty_like(o, device="meta") for o in first if isinstance(o, torch.Tensor)]
            self.atol, self.rtol = correctness.tolerance(job.policy, self.like[0].dtype)
            self.warnings = runtime_checks.degenerate_warnings(first, job.policy, self.chunk)
            self.answers = AnswerStore(device, self.plan.allowance, os.environ.get("HOME"))
            if checking:
                self.answers.put(0, first)
            del first  # stored: the set made again below is held beside the inputs alone, as a check's refill is
            self.reproducible = self.prints[0] == correctness.fingerprints(self.make(self.seeds[0]), self.chunk)
            if not self.reproducible:
                self.notes.append("get_inputs() is not reproducible from torch's seed: each check's inputs are kept")
                if checking:
                    self.answers.put(("inputs", 0), inputs)
            del inputs
            phases.mark("reference: inputs made again")
            if self.plan.float64:
                self._float64()
                phases.mark("reference: float64")
            for i in range(1, len(self.seeds)):
                inputs = self.make(self.seeds[i])
                self.prints.append(correctness.fingerprints(inputs, self.chunk))
                with torch.no_grad():
                    self._keep(i, _own(correctness.flatten_outputs(self.model(*inputs)), inputs), inputs)
                del inputs
                return_freed(device)
            phases.mark("reference: answers")
            self.variant = self._shape_variant() if checking else None
            self.stored = (self.answers.device_bytes, self.answers.parked_bytes)
            if device.type == "cuda":
                torch.cuda.empty_cache()  # what the answers' computation cached would count as the checks' memory
            self.buffers = self.make(2_000_000_007)
            fresh = lambda k: self.make(2_000_000_011 + k)  # noqa: E731
            self.refresh = timing.refresher(fresh, self.buffers)
            self.contenders: dict[str, Callable[..., Any]] = {}
            if "eager" in job.references:
                self.contenders["eager"] = self.model
            if "compile" in job.references:
                compiled = torch.compile(self.model)
                with torch.no_grad():
                    compiled(*self.buffers)  # compile now, while torch is still pristine
                phases.mark("reference: compiled call")
                self.contenders["compile"] = compiled

    def make(self, seed: int) -> list[Any]:
        return make_inputs(self.module.get_inputs, self.device, seed)

    def output_bytes(self) -> list[int]:
        """Per output, the most bytes an answer of it takes (the second shape's answers included)."""
        sizes = [t.numel() * t.element_size() for t in self.like]
        if "variant" in self.answers:
            variant = [t.numel() * t.element_size() for t in self.answers.view("variant")]
            sizes = [max(a, b) for a, b in zip(sizes, variant, strict=False)] + sizes[len(variant) :]
        return sizes

    def memory_report(self) -> MemoryReport:
        return MemoryReport(
            method=self.meter.method,  # type: ignore[arg-type]
            peak_bytes=self.meter.job_peak(),
            eager_peak_bytes=self.memory["eager_peak"],
            plan_bytes=self.plan.peak,
            answers_on_device_bytes=self.stored[0],
            answers_parked_bytes=self.stored[1],
            peak_by_phase=dict(self.phases.peaks),
        )

    def _eager_peak(self, inputs: list[Any]) -> list[Any]:
        """The first check's answer, from a second call whose peak is measured: the parameters and inputs held,
        plus what the call itself allocated. The first call warms up what a process does once (library handles and
        workspaces, lazily loaded code), which is the process's memory, not the problem's."""
        with torch.no_grad(), OpRecorder():  # the dispatch mode's first use costs the process ~70 MB, once
            runtime_checks.poison_tensors(correctness.flatten_outputs(self.model(*inputs)))
        self.phases.mark("reference: first call")
        held = tensor_bytes([*self.model.parameters(), *self.model.buffers()]) + tensor_bytes(inputs)
        self.meter.rebase(held)
        with self.meter.window(self.memory, "call", since=self.meter.current()), torch.no_grad(), self.recorder:
            first = _own(correctness.flatten_outputs(self.model(*inputs)), inputs)
        self.memory["eager_peak"] = held + self.memory.pop("call")
        return first

    def _plan(self, inputs: list[Any], outs: list[Any], checking: bool) -> Plan:
        params = tensor_bytes([*self.model.parameters(), *self.model.buffers()])
        n = len(self.seeds) if checking else 0
        return make_plan(
            self.memory["eager_peak"],
            params,
            tensor_bytes(inputs),
            tensor_bytes(outs),
            n,
            self.device.type,
            make_peak=self.memory["make_peak"],
            separate=self.job.split,
        )

    def _keep(self, i: int, outs: list[Any], inputs: list[Any]) -> None:
        self.answers.put(i, outs)
        if not self.reproducible:
            self.answers.put(("inputs", i), inputs)

    def _float64(self) -> None:
        """Store the first check's float64 reference minus its answer ("float64"), per output in the answer's dtype
        (small values: little rounds away), or add a note. The model is converted in place and back (exactly: its
        values came from its own dtype), and the float64 output waits off the GPU while the deviation is taken a
        piece at a time, so this phase needs about twice the eager peak."""
        # The float64 run may need far more than twice the float32 one (a CPU convolution unfolds its input): it
        # gets what keeps the job within its plan, and is skipped (with a note) where that is not enough.
        room = self.plan.peak - (self.meter.current() - self.meter.base)
        try:
            with _in_float64(self.model, self.device, room), torch.no_grad():
                outs64 = correctness.flatten_outputs(self.model(*correctness.to_float64(self.make(self.seeds[0]))))
            parked = [to_host(o) if self.device.type == "cuda" else o.detach() for o in outs64]
            del outs64
            deviation = []
            for e, x in zip(self.answers.view(0), parked, strict=True):
                d = torch.empty(e.shape, dtype=e.dtype, device=self.device)
                for pd, pe, px in correctness.pieces([d, e, x], self.chunk):
                    pd.copy_(px - pe.double())
                deviation.append(d)
        except Exception as exc:  # reported in the result; the float64 error column then stays empty
            self.notes.append(f"float64 reference unavailable: {describe(exc)}")
            return
        self.answers.put("float64", deviation)

    def deviations(self) -> list[torch.Tensor] | None:
        """The first check's float64 deviation, where there is one: on the device or parked (read a piece at a
        time)."""
        return self.answers.view("float64") if "float64" in self.answers else None

    def inputs_for(self, i: int | str, into: list[Any] | None) -> list[Any]:
        """Check ``i``'s inputs, written into ``into`` (the same buffers, new values) or into new buffers (None).

        Made again from the check's seed, they must fingerprint as they did before the candidate was imported: a
        candidate that changed ``get_inputs`` or torch's generator would be judged on other inputs than its answers'.
        """
        if i == "variant":
            assert self.variant is not None
            _, constants, seed, wanted = self.variant
            with runtime_checks.patched_constants(self.module, constants):
                values = self.make(seed)
        elif self.reproducible:
            values, wanted = self.make(self.seeds[int(i)]), self.prints[int(i)]
        else:  # kept since before the import; a candidate must get its own copy to write on
            values, wanted = self.answers.get(("inputs", i)), self.prints[int(i)]
            if into is None:
                values = correctness.clone_inputs(values)
        if correctness.fingerprints(values, self.chunk) != wanted:
            raise Rejected(
                [
                    runtime_checks.finding(
                        GLOBAL_STATE,
                        f"get_inputs() made other values for check {i} than before the candidate was imported "
                        "(get_inputs, the problem module or torch's random generator was changed)",
                    )
                ]
            )
        if into is None:
            return values
        with torch.no_grad():
            for buf, new in zip(into, values, strict=True):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)
        return into

    def _shape_variant(self) -> tuple[str, dict[str, int], int, list[int | None]] | None:
        """A second valid shape: (its description, the constants, the seed, the inputs' fingerprints), its answers
        stored under "variant"; None (with a note) where there is none."""
        variant = runtime_checks.shape_variant(self.job.problem_source, self.module)
        if not variant:
            self.notes.append("second-shape check skipped: no size constant that only get_inputs() reads")
            return None
        described = ", ".join(f"{k} {getattr(self.module, k)}→{v}" for k, v in variant.items())
        seed = self.job.seed * 1_000_003 + 99
        try:
            with runtime_checks.patched_constants(self.module, variant), torch.no_grad():
                inputs = self.make(seed)
                outs = _own(correctness.flatten_outputs(self.model(*inputs)), inputs)
        except Exception as exc:  # the problem does not allow that shape: the check does not apply
            self.notes.append(f"second-shape check skipped: the reference fails with {described}: {describe(exc)}")
            return None
        self.answers.put("variant", outs)
        return described, variant, seed, correctness.fingerprints(inputs, self.chunk)


class Rejected(Exception):
    """A blocking anti-cheat finding: the job ends with status ``rejected``."""

    def __init__(self, findings: list[RuntimeFinding]) -> None:
        super().__init__(str(findings[0]))
        self.findings = findings


class CandidateRun:
    """The checks of a candidate: correctness, then the anti-cheat probes. ``side`` runs it: in the runner (a
    ``sandbox.runner.RemoteSide``) or, on paths not yet split, in this process (a ``CandidateSide``)."""

    def __init__(self, job: EvalJob, device: torch.device, ref: Reference, side: CandidateSide | RemoteSide) -> None:
        self.job, self.device, self.ref, self.side = job, device, ref, side
        self.findings: list[RuntimeFinding] = []
        self.library: str | None = None  # set when it ran an allowed heavy op in the library (said in the result)

    def note(self, found: list[RuntimeFinding]) -> None:
        self.findings += [f for f in found if str(f) not in {str(g) for g in self.findings}]
        if any(f.blocking for f in found):
            raise Rejected([f for f in self.findings if f.blocking])

    def call(self, inputs: list[Any], what: str, poison_value: float = float("nan")) -> list[Any]:
        """One watched call on ``inputs`` after poisoning freed memory; its flattened outputs."""
        outs, found = self.side.call(inputs, what, poison_value)
        self.note(found)
        return outs

    def compare(self, actual: list[Any], key: int | str, seed: int) -> CheckResult:
        deviation = self.ref.deviations() if key == 0 else None
        answers = self.ref.answers
        return correctness.compare(
            actual, answers.view(key), deviation, self.job.policy, seed, self.ref.chunk, answers.devices(key)
        )

    def _watched(self, key: int | str, what: str, poison_value: float = float("nan")) -> tuple[list[Any], list[int]]:
        """Check ``key``'s inputs in the one input set, a call on them; the outputs and the inputs it changed."""
        buffers = self.ref.inputs_for(key, self.ref.buffers)
        before = correctness.fingerprints(buffers, self.ref.chunk)
        actual = self.call(buffers, what, poison_value)
        return actual, correctness.changed(before, correctness.fingerprints(buffers, self.ref.chunk))

    def check(self) -> list[CheckResult]:
        checks = []
        for i, seed in enumerate(self.ref.seeds):
            actual, changed = self._watched(i, f"running the candidate (seed {seed})")
            check = self.compare(actual, i, seed)
            if changed:
                self.note([runtime_checks.finding(INPUT_MUTATION, f"modified input(s) {changed} (seed {seed})")])
            if check.passed:
                self._judge_right_answer(i, actual, first=not checks)
            del actual  # gone before the next call: an output still alive then is one the candidate kept
            return_freed(self.device)
            if not checks and isinstance(self.side, RemoteSide):
                self._count_runner()
            if not check.passed and all(c.passed for c in checks):
                self.diagnose_failure(i)
            checks.append(check)
        return checks

    def _count_runner(self) -> None:
        """Count the runner's memory into the job's from here: after the candidate's first call, which (as the
        reference's first call in this process) loads what a process loads once, less the input set and the output
        slots, which this process's resident set holds already."""
        assert isinstance(self.side, RemoteSide)
        self.side.runner.rebase()
        self.ref.meter.add_process(self.side.runner.pid, tensor_bytes(self.ref.buffers) + sum(self.ref.output_bytes()))

    def _judge_right_answer(self, i: int, actual: list[Any], first: bool) -> None:
        """What a right answer can still hide: another memory layout (said once), or a constant passing only
        because the problem's output hardly varies. A method of its own, so the answer it fetched goes with it."""
        expected = self.ref.answers.view(i)
        if first:  # the layout is the candidate's, not the seed's
            self.ref.warnings += correctness.layout_differences(actual, expected)
        for a, e in zip(actual, expected, strict=True):
            why = runtime_checks.constant_output(a, e, *correctness.tolerance(self.job.policy, e.dtype), self.ref.chunk)
            if why:
                self.note([runtime_checks.finding(CONSTANT_OUTPUT, why)])

    def diagnose_failure(self, key: int | str, poison_value: float = float("nan")) -> None:
        """Name the cause of a wrong answer where a rerun can tell it.

        Right on the same values in new buffers, freed memory poisoned as for the failed call (the one input set
        still held, so no pointer repeats): an answer replayed from an earlier call. Wrong again, but right when
        freed memory holds the reference's answer: a read of memory it never wrote (the reference's freed output,
        most often). The poison must be the failed call's: an fmax-style read that a huge value broke would pass
        under a NaN, and a changed poison would pass for a replay.
        """
        if self._rerun_passes(key, ("poisoned", poison_value)):
            why = "wrong on inputs in buffers it had seen before, right on the same values in new buffers"
            self.note([runtime_checks.finding(RESULT_CACHE, why)])
        if self._rerun_passes(key, ("primed", self.ref.answers.get(key))):
            why = "wrong when freed memory is poisoned, right when it holds the reference's answer"
            self.note([runtime_checks.finding(UNINITIALISED_MEMORY, why + ": the output is memory it never wrote")])

    def _rerun_passes(self, key: int | str, memory: Memory) -> bool:
        """Run on check ``key``'s inputs in new buffers with freed memory as ``memory`` leaves it; pass?"""
        actual, error = self.side.rerun(self.ref.inputs_for(key, None), memory)
        if actual is None:  # the first failure stands; a rerun only names its cause when it can
            self.ref.notes.append(f"diagnosis rerun raised {error}")
            return False
        return self.compare(actual, key, -1).passed

    def probe(self) -> None:
        """The checks that need a candidate already known to be correct."""
        job, ref = self.job, self.ref
        seed = ref.seeds[0]
        if self.device.type == "cuda":
            # First: work left on another stream races the harness's reads, and the probes below would otherwise
            # name the first wrong answer it happens to cause (a "hard-coded shape" on the second shape's check).
            self.note(self.side.streams(ref.inputs_for(0, ref.buffers)))
        # Poisoned with a huge finite value this time: fmax-style reads can hide a NaN poison.
        again, _ = self._watched(0, "running the candidate again", poison_value=1e30)
        if not self.compare(again, 0, seed).passed:
            del again
            self.diagnose_failure(0, poison_value=1e30)  # a replayed answer, or memory it never wrote
            self.note([runtime_checks.finding(UNINITIALISED_MEMORY, "the answer changed with what freed memory held")])
        else:
            del again
        if len(ref.seeds) > 1:
            # The same values twice, then new values in the same buffers: a cache keyed by content returns its
            # output again (caught as reused memory), one keyed by pointer or id replays on the new values.
            self._watched(0, "running the candidate (replay check)")
            replay, _ = self._watched(1, "running the candidate (replay check)")
            if not self.compare(replay, 1, -1).passed:
                why = "new values in a buffer it had already seen got the old buffer's answer"
                self.note([runtime_checks.finding(RESULT_CACHE, why)])
            del replay
        if ref.variant is not None:
            described = ref.variant[0]
            try:
                other = self.call(ref.inputs_for("variant", None), "running the candidate (second shape)")
            except JobFailed as failed:
                self.note([runtime_checks.finding(HARD_CODED_SHAPE, f"fails with {described}: {failed.reason}")])
            else:
                check = self.compare(other, "variant", -1)
                if not check.passed:
                    self.note([runtime_checks.finding(HARD_CODED_SHAPE, f"wrong with {described}: {check.reason}")])
                del other
        library = library_family(ref.recorder.ops)  # a heavy op + pointwise tail problem: see cheat_tricks
        self.side.fetch_ops()
        ops = self.side.ops
        self.note(
            runtime_checks.op_findings(
                ops, ref.recorder.heavy_families(), bool(ref.recorder.low_dtypes), job.policy, library
            )
        )
        self.library = runtime_checks.library_note(ops, library, self.device)
        if self.library:
            ref.warnings.append(self.library)
        self.note(self.side.changes())


def _result(job: EvalJob, status: Status, reason: str, ref: Reference, phases: Phases, **fields: Any) -> JobResult:
    return JobResult(
        job_id=job.job_id,
        status=status,
        reason=reason,
        details="\n".join(ref.notes),
        warnings=ref.warnings,
        phases=phases.seconds,
        memory=ref.memory_report(),
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


def _load(
    job: EvalJob, device: torch.device, ref: Reference, runner: Runner | None
) -> tuple[CandidateSide | RemoteSide, int, list[RuntimeFinding]]:
    """The candidate built from its source: in the runner where the job has one, else in this process."""
    assert job.candidate_source is not None
    params = dict(ref.model.state_dict())
    if runner is None:
        return CandidateSide.load(
            job.candidate_source,
            job.candidate_name,
            ref.module.Model,
            ref.init,
            params,
            device,
            job.seed,
            ref.like,
            ref.timer.synchronize,
            ref.chunk,
        )
    side, copied, found = RemoteSide.load(
        runner,
        job.candidate_source,
        job.candidate_name,
        job.problem_source,
        job.problem_name,
        ref.init,
        params,
        device,
        job.seed,
        ref.like,
        ref.chunk,
        ref.output_bytes(),
    )
    side.share_buffers(ref.buffers)
    return side, copied, found


def _where_candidate_runs(job: EvalJob, runner: Runner | None) -> str:
    """Said in the result's environment: whether the process that judged the candidate also ran it."""
    if job.candidate_source is None:
        return "none"
    if runner is not None:
        return f"its own (the runner; a bare call's round trip {runner.round_trip_ms * 1e3:.0f} us)"
    return (
        "the worker's (CUDA jobs: the runner is not yet verified on a GPU)" if job.device != "cpu" else "the worker's"
    )


@contextlib.contextmanager
def _stopped(runner: Runner | None) -> Iterator[None]:
    """The runner stopped throughout (it is continued only for its own timed calls), continued after."""
    if runner is None:
        yield
        return
    runner.stop()
    try:
        yield
    finally:
        runner.resume()


def _seen(side: CandidateSide | RemoteSide | None) -> list[RuntimeFinding]:
    """What the candidate's process saw change, blocking findings only; nothing where it cannot say (it died)."""
    if side is None:
        return []
    try:
        return [f for f in side.changes() if f.blocking]
    except JobFailed:
        return []


def run_eval(job: EvalJob, phases: Phases, runner: Runner | None = None) -> JobResult:
    device = torch.device(job.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise JobFailed("runtime_error", "no CUDA device is visible to the worker")
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    env = environment(device)
    env["candidate_process"] = _where_candidate_runs(job, runner)
    meter = PeakMeter(device)  # before the timer, so that its cache-flush buffer counts in the job's peak
    phases.meter = meter
    ref = Reference(job, device, phases, meter)
    contenders = dict(ref.contenders)
    common: dict[str, Any] = {"environment": env}
    run = None
    side: CandidateSide | RemoteSide | None = None
    if runner is None:  # the runner limits its own files (it alone runs candidate code); the judge makes big memfds
        limit_output()
    if job.candidate_source is not None:
        set_candidate(job.candidate_source, job.candidate_name)
        if device.type == "cuda":
            common["compile"] = _compile_check(job, env, phases)
        try:
            with phases("import"):
                side, copied, found = _load(job, device, ref, runner)
            run = CandidateRun(job, device, ref, side)
            run.note(found)
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
                run.note(side.changes())  # a wrong answer from a candidate caught cheating: name the trick
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
        except JobFailed as failed:
            found = [f for f in failed.findings if f.blocking] or _seen(side)
            if not found:
                raise
            # The exception came after a trick the watch saw (a frame read that found nothing, say).
            if side is not None:
                side.restore()
            return _result(job, "rejected", str(found[0]), ref, phases, findings=found, **common)
        except Rejected as rejected:
            if side is not None:
                side.restore()
            return _result(
                job,
                "rejected",
                str(rejected.findings[0]),
                ref,
                phases,
                findings=run.findings if run else rejected.findings,
                **common,
            )
        contenders["candidate"] = side.candidate if isinstance(side, CandidateSide) else side.timed()

    timing_report = None
    if job.time_candidate and contenders:
        # Timing needs no answer: their memory goes back before the contenders run, each freeing its output.
        ref.answers.clear()
        timer = (
            ref.timer if runner is None or run is None else RoundTripTimer(ref.timer, contenders["candidate"], runner)
        )
        audited = side.audited() if side is not None else contextlib.nullcontext()
        with phases("timing"), candidate_code("timing the candidate"), audited, _stopped(runner if run else None):
            timed = timing.time_interleaved(
                contenders,
                ref.buffers,
                ref.refresh,
                timer,
                job.timing,
                job.seed,
                keep="candidate" if run is not None else None,
            )
        timing_report = TimingReport(
            method=timer.method,  # type: ignore[arg-type]
            input_sets=timed.trials,
            flush_bytes=ref.timer.flush_bytes if job.timing.flush_cache else 0,
            launch_hidden=device.type == "cuda" and job.timing.hide_launch,
            stats=timed.stats,
            paired=timed.paired,
            intervals=timed.intervals,
            seconds=round(timed.seconds, 4),
        )
        common["timing"] = timing_report
        if run is not None and side is not None:
            try:
                run.note(side.changes())
                kept = timed.kept if isinstance(side, CandidateSide) else side.fetch_last()
                # The last timed call's output must be a real answer for the inputs it was given, which the
                # buffers still hold: the reference computes it again beside it.
                with torch.no_grad():
                    expected = correctness.flatten_outputs(ref.model(*ref.buffers))
                check = correctness.compare(kept, expected, None, job.policy, -1, ref.chunk)
                del expected, kept
                if not check.passed:
                    why = f"a timed call returned a wrong answer for its inputs ({check.reason})"
                    run.note([runtime_checks.finding(RESULT_CACHE, why)])
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


def run_job(job: AnyJob, runner: Runner | None = None) -> JobResult:
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
            limit_output()
            return run_profile(job, phases)
        return run_eval(job, phases, runner)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.worker", description=__doc__)
    parser.add_argument("--job", required=True, type=Path, help="JSON file holding the job")
    parser.add_argument(
        "--result-fd", required=True, type=int, help="inherited pipe for the signed verdict (1: this stdout)"
    )
    args = parser.parse_args(argv)
    if os.environ.get(contain.REQUEST):  # the local backend's jobs: before anything of the job is read
        contain.enter(candidate=os.environ[contain.REQUEST] == "candidate")
    job: AnyJob = TypeAdapter(Job).validate_json(args.job.read_text())
    _enter_scratch()
    _limit_resources()
    # Forked before the channel's key is read and before anything of the job is built: the runner holds none of it.
    runner = Runner.start(args.result_fd == 1) if isinstance(job, EvalJob) and job.split else None
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
    started = time.perf_counter()
    try:
        result = run_job(job, runner)
    except BaseException as exc:  # a harness failure is reported as the job's verdict, with its traceback
        result = JobResult(
            job_id=job.job_id,
            status="crashed",
            reason=f"the worker failed: {describe(exc)}",
            details=traceback.format_exc(),
        )
    result.wall_s = round(time.perf_counter() - started, 4)
    if runner is not None:
        runner.close()
    send(result.model_dump_json().encode())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate threads, atexit hooks or a broken CUDA context must not
    # hang or alter an exit that comes after the verdict.
    os._exit(0)


if __name__ == "__main__":
    main()
