"""The memory plan of one evaluation job: what it holds at its peak, estimated before it runs and measured as it runs.

One eager forward call of a problem needs ``E`` bytes at its peak: parameters, inputs, output and eager's own
temporaries (``ProblemInfo.eager_peak_bytes``, from the meta pass; the worker measures it again on the device). An
evaluation keeps its memory proportional to ``E`` however many checks it runs:

- one input set, refilled in place for every check and every timed trial (fresh values in the same buffers: an
  answer cached by address or identity is then a wrong answer); a refill holds the buffers beside what one
  ``get_inputs()`` call needs at its peak (``M``: its inputs and any temporaries it makes them with);
- the current check's answer beside the candidate's output (the harness lets go of each output before the next call,
  and follows the last one's storage weakly: one still alive then was kept by the candidate);
- the other checks' answers on the device only while the whole stays within ``TARGET × E``; the rest wait in host
  memory (CUDA) or in an unlinked scratch file (CPU), computed before any candidate code exists like all of them;
- the float64 reference of the first check, run on the float32 model converted in place, its output parked off the
  device, and kept as its float32 deviation from the answer;
- comparisons in chunks of at most ``chunk_elements(E)`` elements.

``Plan`` gives each phase's peak from those terms; the worker builds the same plan from what it measured, so the
pre-check (``working_set_bytes``) and the job agree on where every buffer goes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import resource
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

TARGET = 2.0  # device answers are kept while the check phase stays under this many eager peaks
CAP = 2.5  # no phase may plan for more than this many eager peaks (the fixed buffers aside)
# Held whatever the problem: CUDA, the libraries' workspaces (cuBLAS, cuDNN); CPU, allocator slack.
FIXED_BYTES = {"cuda": 64 << 20, "cpu": 16 << 20}
# The timer's cache flush, made for the timing phase only: 2 × the L2 on a GPU (at most 128 MiB on today's), at most
# 64 MiB on the CPU (tools.timing).
FLUSH_BYTES = {"cuda": 128 << 20, "cpu": 64 << 20}
MIN_CHUNK = 1 << 16
# A GPU wants few, large pieces (each is a handful of kernel launches). On the CPU a piece's float64 temporaries stay
# under 2 MiB, below the sizes glibc serves by mmap: larger ones would each cost fresh pages, and once glibc's
# adaptive threshold has risen past them, freed ones stay in a heap that the resident set never gives back.
MAX_CHUNK = {"cuda": 1 << 22, "cpu": 1 << 18}
SCRATCH_PER_ELEMENT = 48  # float64 temporaries of one compared chunk (values, differences, masks)


def tensor_bytes(values: Iterable[Any]) -> int:
    """The bytes of the tensors among ``values`` (other values count nothing)."""
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def chunk_elements(eager_peak: int, device: str) -> int:
    """Elements compared at once: the chunk's float64 temporaries stay near a fifth of the eager peak."""
    return max(MIN_CHUNK, min(MAX_CHUNK[device], eager_peak // 256))


@dataclass(frozen=True)
class Plan:
    """Where an evaluation's buffers go and the peak each phase reaches, in bytes.

    ``answers`` holds the size of every answer set the job stores (each check's outputs, the first check's float64
    deviation, the second shape's), in the order the worker stores them; each stays on the device while
    ``allowance`` has room.
    """

    eager_peak: int
    params: int
    inputs: int
    outputs: int
    make_peak: int  # one get_inputs() call's peak: the inputs it returns and the temporaries it made them with
    answers: tuple[int, ...]
    fixed: int
    float64: bool
    device: str
    separate: bool = False  # the candidate runs in the runner: its outputs cross through a slot of one output set

    @property
    def allowance(self) -> int:
        """Device bytes for stored answers: what keeps a check (one eager call, its answer beside the candidate's
        output; or the refill of the input set) within TARGET eager peaks."""
        return max(0, int(TARGET * self.eager_peak) - max(self.eager_peak + self.outputs, self._refill))

    @property
    def _refill(self) -> int:
        """The input set beside a new one being made (a check's, a timed trial's)."""
        return self.inputs + self.make_peak

    @property
    def on_device(self) -> tuple[bool, ...]:
        kept, out = 0, []
        for size in self.answers:
            fits = kept + size <= self.allowance
            kept += size if fits else 0
            out.append(fits)
        return tuple(out)

    @property
    def device_answer_bytes(self) -> int:
        return sum(size for size, kept in zip(self.answers, self.on_device, strict=True) if kept)

    @property
    def parked_bytes(self) -> int:
        """Bytes of answers kept off the device, plus the float64 output parked there while its deviation is taken."""
        parked = 2 * self.outputs if self.float64 else 0
        return sum(self.answers) - self.device_answer_bytes + parked

    @property
    def scratch(self) -> int:
        return SCRATCH_PER_ELEMENT * chunk_elements(self.eager_peak, self.device)

    def float64_peak(self) -> int:
        """The float64 reference's phase: the model and one input set in float64 (the float32 input freed as it is
        cast), beside the first answer where it stays on the device; then the deviation, taken beside the float64
        output, which a GPU job parks in host memory and a CPU job cannot."""
        first = self.answers[0] if self.answers and self.on_device[0] else 0
        beside = 2 * self.outputs if self.device == "cpu" else self.scratch
        deviation = self.params + 2 * self.outputs + beside
        made = first + 2 * self.params + max(self.make_peak, 3 * self.inputs)  # made in float32, then cast
        return self.fixed + max(2 * self.eager_peak + first, made, deviation)

    def phases(self) -> dict[str, int]:
        """Each phase's peak on the device, the fixed buffers included."""
        e, stored = self.eager_peak, self.device_answer_bytes
        call = e + self.outputs + self.scratch  # a call beside the answer or the previous output
        if self.separate:  # the output's slot in the judge (sandbox.shared), beside its copy and the runner's output
            call += self.outputs
        flush = FLUSH_BYTES[self.device]
        refill = self._refill + self.outputs  # a timed trial's refill: beside the output kept from the last call
        phases = {
            "reference": stored + max(e, self.make_peak),
            "checks": stored + max(call, self._refill),
            # A GPU timer frees its flush buffer while a trial's inputs are made (tools.timing); a CPU timer keeps it.
            # The runner flushes before its own calls (sandbox.runner.RoundTripTimer), with a buffer of its own.
            "timing": max(flush + call, refill)
            if self.device == "cuda"
            else (1 + self.separate) * flush + max(call, refill),
        }
        out = {name: self.fixed + peak for name, peak in phases.items()}
        if self.float64:
            out["float64"] = self.float64_peak()
        return out

    @property
    def peak(self) -> int:
        return max(self.phases().values())


def make_plan(
    eager_peak: int,
    params: int,
    inputs: int,
    outputs: int,
    n_checks: int,
    device: str,
    float64: bool = True,
    make_peak: int = 0,
    separate: bool = False,
) -> Plan:
    """The plan of a job with ``n_checks`` checks (0: a baseline, which times the reference alone), its answers in the
    order the worker stores them: the first check's, its float64 deviation, the other checks', the second shape's
    (at most a full set). ``make_peak``: one ``get_inputs()`` call's peak (at least the inputs; 0: not measured).
    ``separate``: the candidate runs in a process of its own (``sandbox.runner``), whose memory counts too.

    The float64 reference runs where its phase fits within ``CAP`` eager peaks (a reduction of one large input to a
    scalar casts three input sizes' worth; float64 would be the whole job's peak there, for a column of the report),
    and not at all with ``float64`` False (the plan of a job whose float64 run was refused at run time).
    """
    eager_peak = max(eager_peak, params + inputs + outputs)
    make_peak = max(make_peak, inputs)
    checking = n_checks > 0
    answers = (outputs,) * n_checks + (outputs,) * checking

    def plan(float64: bool) -> Plan:
        slots = (*answers[:1], outputs, *answers[1:]) if float64 else answers
        return Plan(
            eager_peak, params, inputs, outputs, make_peak, slots, FIXED_BYTES[device], float64, device, separate
        )

    with_float64 = plan(checking and float64)
    if with_float64.float64 and with_float64.float64_peak() > FIXED_BYTES[device] + CAP * eager_peak:
        return plan(False)
    return with_float64


# ------------------------------------------------------------------------------------------ measured peaks

_STATUS = re.compile(r"^(VmHWM|VmRSS|VmSize):\s+(\d+) kB", re.MULTILINE)


def _rss(pid: int | None = None) -> dict[str, int]:
    """This process's (or ``pid``'s) memory figures; none for a process that has ended."""
    try:
        text = Path(f"/proc/{pid or 'self'}/status").read_text()
    except OSError:
        return {}
    return {k: int(v) << 10 for k, v in _STATUS.findall(text)}


class PeakMeter:
    """The peak memory a stretch of the job used, and the whole job's.

    CUDA: ``torch.cuda.max_memory_allocated`` (every tensor the process holds, the candidate's too), counted from
    ``base``, what was allocated when the meter was made. CPU: the resident set's high-water mark, reset through
    ``/proc/self/clear_refs`` where the kernel allows it (a process may reset its own), counted from the base that
    ``rebase`` sets: the resident set then, less the tensors held, so that what the interpreter and its libraries
    load once (about 90 MB: code, a dispatch mode's first use) does not count as the problem's memory.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.method = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "rss"
        self._job_peak = 0
        self._other: tuple[int, int] | None = None  # another process of the job, and its base (add_process)
        self.resettable = device.type == "cuda" or self._reset_rss()
        self.base = self._current()

    def current(self) -> int:
        """Memory held now."""
        return self._current()

    def _current(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return _rss().get("VmRSS", 0)

    def _peak_since_reset(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        return _rss().get("VmHWM", 0)

    @staticmethod
    def _reset_rss() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def rebase(self, held: int) -> None:
        """CPU: count the job's memory from now on, from the resident set less ``held`` tensor bytes; CUDA: nothing
        (the allocator counts tensors alone)."""
        if self.device.type == "cpu":
            self._reset()
            self._job_peak = 0
            self.base = self._current() - held

    def _reset(self) -> None:
        self._job_peak = max(self._job_peak, self._peak_since_reset())
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.resettable:
            self._reset_rss()

    @contextlib.contextmanager
    def window(self, into: dict[str, int], key: str, since: int | None = None) -> Iterator[None]:
        """Measure the peak inside the block, above ``since`` (default ``base``), into ``into[key]``; the job's peak
        keeps counting."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._reset()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            into[key] = max(0, self._peak_since_reset() - (self.base if since is None else since))
            self._reset()

    def add_process(self, pid: int, shared: int) -> None:
        """CPU: count another process of the job too (the runner), from its resident set now, less ``shared`` bytes
        of this process's memory it maps (counted here already)."""
        self._other = (pid, _rss(pid).get("VmRSS", 0) + shared)

    def job_peak(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        own = max(0, max(self._job_peak, self._peak_since_reset()) - self.base)
        if self._other is None:
            return own
        pid, base = self._other
        return own + max(0, _rss(pid).get("VmHWM", base) - base)


@functools.cache
def _malloc_trim() -> object | None:
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def return_freed(device: torch.device) -> None:
    """CPU: hand the heap's free pages back to the kernel (glibc's ``malloc_trim``), so that the resident set, which
    the job's peak is read from, holds live memory and not what earlier calls freed.

    glibc keeps a freed block resident once its adaptive mmap threshold has risen past the block's size (up to 32 MB),
    so from one check to the next a CPU job's resident set grew by 100-230 MB of freed temporaries, by chance of
    which thread allocated what: the same problem's peak measured 334 MB, 365 MB and 451 MB. Nothing on CUDA, whose
    peak is the allocator's count of live tensors; nothing where the C library is not glibc.
    """
    trim = _malloc_trim() if device.type == "cpu" else None
    if trim is not None:
        trim(0)  # type: ignore[operator]


@contextlib.contextmanager
def memory_cap(device: torch.device, extra: int) -> Iterator[None]:
    """Inside the block, asking for more than ``extra`` bytes beyond what is held now fails with an out-of-memory
    error, where it would otherwise succeed and take the memory of whatever runs beside the job.

    For work whose need cannot be known beforehand (the float64 reference: a CPU convolution in float64 unfolds its
    input, five times its float32 peak). CUDA: the caching allocator's per-process fraction; CPU: the soft limit of
    the address space, which a process may lower and raise again up to its hard limit.
    """
    if device.type == "cuda":
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = min(1.0, max(0.0, (torch.cuda.memory_reserved(device) + extra) / total))
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()  # an out-of-memory error leaves its half-made blocks cached
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _rss()["VmSize"] + max(0, extra)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
