"""Anti-cheat, the dynamic half: what the candidate actually does while the worker runs it.

``tools.checks`` reads the source; this module watches the process. The worker builds a ``Watch``
before it imports any candidate code, so every snapshot below is of the pristine harness:

- ``HarnessSnapshot``: identity of the clock and harness functions (and torch's global switches),
  compared after every candidate phase: a patched ``Event.elapsed_time`` or a flipped TF32 switch shows.
- ``OpRecorder``: a ``TorchDispatchMode`` that lists the aten ops a call executes, so the reference's
  own heavy op (``aten._softmax``, ``aten.mm`` ...) is caught however it was reached, and so are
  fp16/bf16 results in an fp32 problem.
- ``AuditWatch``: a ``sys.addaudithook`` hook (it cannot be removed) that names frame and ``gc``
  reads, ``exec``/``compile``, forked processes and opened descriptors when candidate code asks for them.
- ``watch_call``: the output must be a plain ``torch.Tensor`` and must not change after the call
  returned (work left on another stream or thread); no thread or child process may outlive the call.
- ``poison``: fills the allocator's free memory with NaN before each call, so an output that reuses
  the reference's freed result, or any uninitialised read, shows up as a wrong answer; ``prime``
  leaves the answer there instead, which tells such a read from a plain wrong answer. ``poisoned``
  also has glibc fill every block malloc hands out during the call (CPU only).
- ``shape_variant``: a second valid input shape, from the problem's size constants.
- CUDA only: the streams of the kernels a call launches (through the profiler), and L2 persistence.

Each finding names its trick from ``tools.cheat_tricks`` so the verdict reads the same as a static one.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import functools
import os
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tools.cheat_tricks import (
    ATEN_FAMILY,
    DYNAMIC_CODE,
    FRAME_INSPECTION,
    GLOBAL_STATE,
    L2_PERSISTENCE,
    LAYOUT_OPS,
    LAZY_TENSOR,
    LIBRARY_FAMILIES,
    PRECISION_DOWNGRADE,
    REFERENCE_INHERITANCE,
    REFERENCE_OP,
    SIDE_STREAM,
    THREAD,
    TIMER_PATCH,
    VERDICT_FORGERY,
)
from tools.correctness import fingerprints, flatten_outputs, pieces, tolerance
from tools.protocol import Policy, RuntimeFinding

LOW_DTYPES = {torch.float16, torch.bfloat16}
LATE_WRITE_WAIT_S = 0.02  # how long the worker waits for a late writer before it looks again


def finding(trick: str, detail: str, blocking: bool = True) -> RuntimeFinding:
    return RuntimeFinding(trick=trick, detail=detail, blocking=blocking)


# ------------------------------------------------------------------------------ harness snapshot


def _watched(device: torch.device) -> dict[str, Any]:
    import tools.correctness
    import tools.timing

    watched: dict[str, Any] = {
        "time": time,
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "torch.nn.functional": torch.nn.functional,
        "torch.testing": torch.testing,
        "torch.utils._pytree": sys.modules["torch.utils._pytree"],
        "tools.correctness": tools.correctness,
        "tools.timing": tools.timing,
        "os": os,
        "threading": threading,
    }
    if "sandbox.channel" in sys.modules:  # the worker's verdict channel: watched where loaded, never imported here
        watched["sandbox.channel"] = sys.modules["sandbox.channel"]
    if device.type == "cuda":
        watched |= {
            "torch.cuda": torch.cuda,
            "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Stream": torch.cuda.Stream,
        }
        watched["torch._C._CudaEventBase"] = torch._C._CudaEventBase
    return watched


def _switches() -> dict[str, Any]:
    """torch's process-wide switches; a candidate flipping one changes how the reference runs."""
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
    }


PRECISION_SWITCHES = {
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.get_float32_matmul_precision()",
}


class HarnessSnapshot:
    """The identity of every callable the harness relies on, and torch's switches, at one moment."""

    def __init__(self, device: torch.device) -> None:
        self._watched = _watched(device)
        self._ids = {
            (root, name): id(value)
            for root, holder in self._watched.items()
            for name, value in list(vars(holder).items())
            if callable(value) or isinstance(value, staticmethod | classmethod | property)
        }
        self._switches = _switches()

    def changes(self) -> list[RuntimeFinding]:
        out = []
        for (root, name), ident in self._ids.items():
            now = vars(self._watched[root]).get(name)
            if now is None or id(now) != ident:
                out.append(finding(TIMER_PATCH, f"{root}.{name} was replaced or removed while the candidate ran"))
        for key, before in self._switches.items():
            now = _switches()[key]
            if now != before:
                precision = key in PRECISION_SWITCHES
                out.append(
                    finding(
                        PRECISION_DOWNGRADE if precision else GLOBAL_STATE,
                        f"{key} changed from {before!r} to {now!r}",
                    )
                )
        return out

    def restore_switches(self) -> None:
        """Put torch's switches back, so a finding does not also skew the reference's timing."""
        torch.backends.cuda.matmul.allow_tf32 = self._switches["torch.backends.cuda.matmul.allow_tf32"]
        torch.backends.cudnn.allow_tf32 = self._switches["torch.backends.cudnn.allow_tf32"]
        torch.set_float32_matmul_precision(self._switches["torch.get_float32_matmul_precision()"])
        torch.set_num_threads(self._switches["torch.get_num_threads()"])


# ---------------------------------------------------------------------------------- aten ops


def op_family(name: str) -> str | None:
    """``_softmax`` -> softmax, ``addmm`` -> mm; None for light ops."""
    return ATEN_FAMILY.get(name)


class OpRecorder(TorchDispatchMode):
    """Counts the aten ops run under it and the low-precision floating dtypes they produce."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.low_dtypes: Counter[str] = Counter()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        out = func(*args, **(kwargs or {}))
        for leaf in out if isinstance(out, tuple | list) else [out]:
            if isinstance(leaf, torch.Tensor) and leaf.dtype in LOW_DTYPES:
                self.low_dtypes[f"aten.{name} -> {str(leaf.dtype).removeprefix('torch.')}"] += 1
        return out

    def heavy_families(self) -> set[str]:
        return {f for name in self.ops if (f := op_family(name))}


def op_findings(
    recorder: OpRecorder, reference_families: set[str], reference_low: bool, policy: str, library: str | None = None
) -> list[RuntimeFinding]:
    """Reference ops and reduced precision in what the candidate ran. ``library``: the heavy family this problem
    may leave to the library (``cheat_tricks.library_family``); a candidate that does so must run nothing else in
    torch but layout ops, so that the pointwise tail is its own kernel and not torch's."""
    out = []
    for name, count in sorted(recorder.ops.items()):
        family = op_family(name)
        if family and family in reference_families and family != library:
            out.append(finding(REFERENCE_OP, f"executed aten.{name} ({count}×), the reference's own {family} op"))
    if library is not None and library in recorder.heavy_families():
        torch_side = sorted(n for n in recorder.ops if op_family(n) != library and n not in LAYOUT_OPS)
        if torch_side:
            ran = ", ".join(f"aten.{n}" for n in torch_side)
            out.append(
                finding(
                    REFERENCE_OP,
                    f"left the {library} op to the library and also executed {ran} in torch: with the heavy op in "
                    "the library, the pointwise tail must be the candidate's own kernel",
                )
            )
    if not reference_low and recorder.low_dtypes:
        what = ", ".join(sorted(recorder.low_dtypes))
        out.append(finding(PRECISION_DOWNGRADE, f"computed in reduced precision: {what}", blocking=policy == "strict"))
    return out


def library_note(recorder: OpRecorder, library: str | None, device: torch.device) -> str | None:
    """The line a result carries when the candidate ran the heavy op in the library (allowed, but said)."""
    if library is None or library not in recorder.heavy_families():
        return None
    gpu, cpu = LIBRARY_FAMILIES[library]
    ran = ", ".join(f"aten.{n}" for n in sorted(recorder.ops) if op_family(n) == library)
    return (
        f"heavy op by the library: {gpu if device.type == 'cuda' else cpu} ({ran} in torch); the pointwise tail "
        "is the candidate's own kernel"
    )


def inherited_reference(model_cls: type, reference_cls: type) -> list[RuntimeFinding]:
    """ModelNew built on the problem's Model: that class, or one whose forward is the same code."""
    ref_code = reference_cls.forward.__code__.co_code
    for base in model_cls.__mro__[1:]:
        forward = vars(base).get("forward")
        if base is reference_cls or (
            forward is not None
            and getattr(forward, "__code__", None) is not None
            and (forward.__code__.co_code == ref_code and base.__name__ == reference_cls.__name__)
        ):
            return [
                finding(REFERENCE_INHERITANCE, f"ModelNew inherits {base.__module__}.{base.__name__}, the reference")
            ]
    return []


# ----------------------------------------------------------------------------------- audit hook


FRAME_EVENTS = {"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects"}
FRAME_EVENTS |= {"gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile"}
FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals"}
PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "subprocess.Popen"}
INSPECTING_MODULES = ("inspect.py", "traceback.py")


class AuditWatch:
    """Names the audited operations candidate code performs; installed once, on for candidate phases."""

    def __init__(self, candidate_file: str) -> None:
        self.candidate_file = candidate_file
        self.findings: list[RuntimeFinding] = []
        self.enabled = False
        self._busy = False
        sys.addaudithook(self._hook)

    def _from_candidate(self) -> bool:
        frame = sys._getframe(2)  # 0: this method, 1: the hook, 2: whoever raised the event
        for depth in range(4):
            if frame is None:
                return False
            filename = frame.f_code.co_filename
            if filename == self.candidate_file:
                return True
            # a frame read through inspect/traceback is still the candidate's doing; anything else
            # (torch, typing, dataclasses ...) calling these for its own reasons is not
            if depth == 0 and not filename.endswith(INSPECTING_MODULES):
                return False
            frame = frame.f_back
        return False

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.enabled or self._busy:
            return
        trick = self._classify(event, args)
        if trick is None:
            return
        self._busy = True
        try:
            if self._from_candidate():
                detail = f"{event}{_short(args)}"
                if all(f.detail != detail for f in self.findings):
                    self.findings.append(finding(trick, detail))
        finally:
            self._busy = False

    @staticmethod
    def _classify(event: str, args: tuple[Any, ...]) -> str | None:
        if event in FRAME_EVENTS:
            return FRAME_INSPECTION
        if event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRS:
            return FRAME_INSPECTION
        if event == "ctypes.dlsym" and args and "PyDLL" in type(args[0]).__name__:
            return FRAME_INSPECTION  # ctypes.pythonapi: the interpreter's own C API
        if event in ("exec", "compile"):
            return DYNAMIC_CODE
        if event in PROCESS_EVENTS:
            return THREAD
        if event == "open" and args:
            path = args[0]
            if isinstance(path, int) or (isinstance(path, str | bytes) and _is_fd_path(os.fsdecode(path))):
                return VERDICT_FORGERY
        return None

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        self.enabled = True
        try:
            yield
        finally:
            self.enabled = False


def _is_fd_path(path: str) -> bool:
    parts = Path(path).parts
    return path.startswith("/dev/fd") or (len(parts) >= 4 and parts[1] == "proc" and parts[3] == "fd")


def _short(args: tuple[Any, ...]) -> str:
    text = ", ".join(repr(a)[:60] for a in args[:2] if not isinstance(a, types.FrameType))
    return f"({text})" if text else ""


# -------------------------------------------------------------------------------- one watched call


def _python_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def child_processes() -> list[int]:
    """Pids of this process's live children (from /proc; empty where /proc has no children files)."""
    pids: list[int] = []
    for task in Path("/proc/self/task").glob("*"):
        with contextlib.suppress(OSError):  # a task that ended while we looked has nothing to say
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def plain_outputs(outs: list[Any]) -> list[RuntimeFinding]:
    """Outputs must be plain tensors holding data (one on the wrong device is merely incorrect)."""
    out = []
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            out.append(finding(LAZY_TENSOR, f"output {i} is a {type(o).__name__}, a torch.Tensor subclass"))
        elif isinstance(o, torch.Tensor) and o.device.type == "meta":
            out.append(finding(LAZY_TENSOR, f"output {i} is a meta tensor: it holds no data"))
    return out


def watch_call(
    fn: Callable[..., Any],
    args: list[Any],
    device: torch.device,
    synchronize: Callable[[], None],
    harness_threads: set[threading.Thread],
    harness_children: frozenset[int] = frozenset(),
    chunk: int = 1 << 22,
) -> tuple[Any, list[RuntimeFinding]]:
    """Call ``fn`` and look for work that outlives the call: late writes, threads, children.

    ``harness_threads`` and ``harness_children`` are the threads and child processes alive before the
    candidate was imported (torch.compile's compile workers, say): any other one still alive after the
    call is the candidate's.
    """
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    out = fn(*args)
    # Seen at once: a thread that writes the output and ends before the wait below is still a thread.
    started = [t for t in _python_threads() - harness_threads if t.is_alive()]
    outs = flatten_outputs(out)
    found = plain_outputs(outs)
    if found:
        return out, found
    tensors = [o for o in outs if isinstance(o, torch.Tensor)]
    # The fingerprint is ordered after the candidate's work on the current stream only: what the timer sees.
    # Whatever writes the output later (a side stream, a thread) makes the final one differ. A fingerprint, not a
    # copy: an output may be as large as the whole memory plan allows for one.
    with torch.no_grad():
        snapshot = fingerprints(tensors, chunk)
    if stream is not None:
        stream.synchronize()
    synchronize()
    time.sleep(LATE_WRITE_WAIT_S)
    synchronize()
    new_threads = [t for t in _python_threads() - harness_threads if t.is_alive()]
    with torch.no_grad():
        final = fingerprints(tensors, chunk)
    late = [i for i, (s, f) in enumerate(zip(snapshot, final, strict=True)) if s != f]
    if late:
        where = "another stream" if device.type == "cuda" and not (started or new_threads) else "another thread"
        found.append(
            finding(
                THREAD if where == "another thread" else SIDE_STREAM,
                f"output {late[0]} kept changing after the call returned: work left running on {where}",
            )
        )
    if new_threads:
        names = ", ".join(sorted(t.name for t in new_threads)[:3])
        found.append(
            finding(THREAD, f"{len(new_threads)} thread(s) started by the candidate outlive the call ({names})")
        )
    if stream is not None and torch.cuda.current_stream(device) != stream:
        found.append(finding(SIDE_STREAM, "the call changed the current CUDA stream and left it changed"))
    if kids := [pid for pid in child_processes() if pid not in harness_children]:
        found.append(finding(THREAD, f"child process(es) {kids[:3]} still running after the call"))
    return out, found


# ------------------------------------------------------------------------------------- poisoning


_SMALL_POOL = 1 << 20  # the CUDA caching allocator serves requests up to 1 MiB from a pool of its own


def _unserved(free: list[int], wanted: list[int]) -> list[int]:
    """The sizes in ``wanted`` that no block of ``free`` can hold, each free block serving one (smallest first)."""
    left = sorted(f for f in free if f > _SMALL_POOL)
    missing = []
    for size in sorted(wanted, reverse=True):
        fit = next((i for i, f in enumerate(left) if f >= size), None) if size > _SMALL_POOL else None
        if fit is None:
            missing.append(size)
        else:
            del left[fit]
    return missing


def _inactive_blocks() -> tuple[list[int], list[int]]:
    """Requests that take each inactive block of the CUDA caching allocator: (large pool, small pool).

    A request is served from the pool its size belongs to, so a free block of the small pool larger than 1 MiB (a
    whole 2 MiB segment) is asked for 1 MiB at a time: asked for whole, it would come from a new large segment, and
    the process would hold one more segment after every call.
    """
    large: list[int] = []
    small: list[int] = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", []):
            if block.get("state") != "inactive":
                continue
            if segment.get("segment_type") != "small":
                large.append(block["size"])
                continue
            size = block["size"]
            while size > _SMALL_POOL:
                small.append(_SMALL_POOL)
                size -= _SMALL_POOL
            small.append(size)
    return large, small


def _fill_free_memory(device: torch.device, like: list[torch.Tensor], fill: Callable[[torch.Tensor], None]) -> None:
    """Take the allocator's free memory, ``fill`` each block (a float32 tensor), and give it back.

    On CUDA every inactive block of the caching allocator is taken (biggest first, so each request
    fits one block), and a block the size of each output that no inactive block could hold: that
    output would come from memory the allocator has yet to take from the driver, which may hold this
    process's earlier values. Outputs an inactive block can hold need no block of their own, so the
    memory the process holds stays what its calls need (a block per output on every call grew it by
    one output a call: 12 outputs, 78 GB, after a dozen checks of a 6 GB output). On the CPU,
    blocks the size of each output are taken.
    """
    sizes = [t.numel() * t.element_size() for t in like]
    if device.type == "cuda":
        large, small = _inactive_blocks()
        sizes = large + small + _unserved(large, sizes)
    held = []
    with torch.no_grad():
        for size in sorted(sizes, reverse=True):
            if size >= 4:
                block = torch.empty(size // 4, dtype=torch.float32, device=device)
                fill(block)
                held.append(block)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del held


def poison(device: torch.device, like: list[torch.Tensor], value: float = float("nan")) -> None:
    """Fill freed memory with ``value`` (NaN by default), so nothing reads as a right answer by luck."""
    _fill_free_memory(device, like, lambda block: block.fill_(value))


# mallopt(3): while set, glibc fills each block malloc hands out with this byte's complement (and each freed block
# with the byte), so fresh memory holds the fill however its block was reached. torch's CPU allocator takes its
# blocks from malloc; poison's fill reaches only blocks sized like the outputs, and the small scratch a candidate
# reads uninitialised (a row maximum's start, say) comes from elsewhere in the heap, holding whatever it held.
_M_PERTURB = -6


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    return getattr(ctypes.CDLL(None), "mallopt", None)


def _malloc_perturb(byte: int) -> bool:
    """Set glibc's perturb byte (0: off); False where the C library has no mallopt (not glibc)."""
    mallopt = _mallopt()
    return mallopt is not None and mallopt(_M_PERTURB, byte) == 1


@contextlib.contextmanager
def poisoned(device: torch.device, like: list[torch.Tensor], value: float = float("nan")) -> Iterator[None]:
    """``poison`` before the call inside; on the CPU, every block malloc hands out meanwhile filled too.

    A byte fill cannot spell NaN, so the CPU's is a huge value of the poison's sign (bytes 0x7F: 3.4e38 as
    float32, 1.4e306 as float64; 0xFE: -1.7e38), which fmax-style reads do not hide either.
    """
    poison(device, like, value)
    on = device.type == "cpu" and _malloc_perturb(0xFF ^ (0xFE if value < 0 else 0x7F))
    try:
        yield
    finally:
        if on:
            _malloc_perturb(0)


def prime(device: torch.device, answers: list[torch.Tensor]) -> None:
    """Leave the answers at the start of every free block: what reusing the reference's freed output finds."""
    flat = [a.detach().reshape(-1).view(torch.uint8) for a in answers if a.is_contiguous()]

    def fill(block: torch.Tensor) -> None:
        raw = block.view(torch.uint8)
        for answer in flat:
            if answer.numel() <= raw.numel():
                raw[: answer.numel()].copy_(answer)
                return

    _fill_free_memory(device, answers, fill)


@contextlib.contextmanager
def primed(device: torch.device, answers: list[torch.Tensor]) -> Iterator[None]:
    """``prime`` before the call inside (the counterpart of ``poisoned``)."""
    prime(device, answers)
    yield


def poison_tensors(tensors: list[Any]) -> None:
    """Overwrite tensors the worker is done with (the reference's outputs) before they are freed."""
    with torch.no_grad():
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.numel():
                if t.is_floating_point() or t.is_complex():
                    t.fill_(float("nan"))
                elif t.dtype != torch.bool:
                    t.fill_(0x7F)


# -------------------------------------------------------------------------------- constant output


def _mean_and_spread(e: torch.Tensor, limit: int, device: torch.device | None = None) -> tuple[float, float]:
    """Mean and standard deviation of ``e`` in float64, a piece at a time on ``device`` (default: ``e``'s)."""
    device = e.device if device is None else device
    total = torch.zeros((), dtype=torch.float64, device=device)
    for (p,) in pieces([e], limit, device):
        total += p.double().sum()
    mean = float(total) / e.numel()
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for (p,) in pieces([e], limit, device):
        squares += (p.double() - mean).square().sum()
    return mean, (float(squares) / e.numel()) ** 0.5


def _all_near(
    e: torch.Tensor, value: float, atol: float, rtol: float, limit: int, device: torch.device | None = None
) -> bool:
    """Is every value of ``e`` within ``atol + rtol·|e|`` of ``value``? Computed on ``device`` (default: ``e``'s)."""
    device = e.device if device is None else device
    far = torch.zeros((), dtype=torch.int64, device=device)
    for (p,) in pieces([e], limit, device):
        p64 = p.double()
        far += ((p64 - value).abs() > atol + rtol * p64.abs()).sum()
    return not int(far)


def degenerate_warnings(expected: list[torch.Tensor], policy: Policy, limit: int = 1 << 22) -> list[str]:
    """Warn when a constant passes the tolerance on an output, or the output hardly varies."""
    out = []
    for i, e in enumerate(expected):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point() and e.numel() > 1):
            continue
        atol, rtol = tolerance(policy, e.dtype)  # each output's own: outputs may differ in dtype
        where = f"output {i}" if len(expected) > 1 else "the output"
        mean, std = _mean_and_spread(e, limit)
        if std <= 1e-6 * max(abs(mean), 1e-30):
            out.append(f"degenerate problem: {where} is nearly constant (mean {mean:.3g}, std {std:.3g})")
        elif _all_near(e, mean, atol, rtol, limit):
            out.append(
                f"degenerate problem: a constant ({mean:.3g}) passes the {policy} tolerance (atol={atol:g}) on "
                f"every value of {where}; kernels are also held to tracking its variation"
            )
    return out


def constant_output(
    actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, limit: int = 1 << 22
) -> str | None:
    """Why ``actual`` passes only because ``expected`` is within the tolerance of a constant, or None.

    Applies where a constant passes: then the candidate's error must be well below the reference's
    own variation (relative RMS error under 0.5; a constant scores 1 or more, real kernels ~1e-3). Computed on
    ``actual``'s device (``expected`` may wait in host memory).
    """
    if not (expected.is_floating_point() and expected.numel() > 1):
        return None
    device = actual.device
    mean, spread = _mean_and_spread(expected, limit, device)
    if spread == 0.0 or not _all_near(expected, mean, atol, rtol, limit, device):
        return None
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for a, e in pieces([actual.detach(), expected], limit):
        squares += (a.double() - e.double()).square().sum()
    ratio = (float(squares) / expected.numel()) ** 0.5 / spread
    if ratio < 0.5:
        return None
    return (
        f"the output is no closer to the reference than a constant (RMS error {ratio:.2f}× the reference's "
        f"spread); it passes only because every value is within atol={atol:g}"
    )


# --------------------------------------------------------------------------------- second shape


def shape_variant(problem_source: str, module: types.ModuleType) -> dict[str, int]:
    """Halved values for the module-level int constants ``get_inputs`` reads and nothing else does.

    Constants the model's constructor or forward also read (``features`` of a LayerNorm) stay, so the
    same model weights apply. Empty when the problem has no such constant.
    """
    tree = ast.parse(problem_source)
    constants = {
        t.id
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        for t in stmt.targets
        if isinstance(t, ast.Name) and type(getattr(module, t.id, None)) is int
    }
    used_by: dict[str, set[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.ClassDef):
            used_by[stmt.name] = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    free = used_by.get("get_inputs", set()) & constants
    for name, used in used_by.items():
        if name != "get_inputs":
            free -= used
    return {name: max(1, getattr(module, name) // 2) for name in sorted(free) if getattr(module, name) >= 2}


@contextlib.contextmanager
def patched_constants(module: types.ModuleType, values: dict[str, int]) -> Iterator[None]:
    before = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(module, name, value)


# ----------------------------------------------------------------------------------------- CUDA


def stream_policy_window_attribute() -> Any:
    """The access-policy-window attribute id (cuda-bindings 13 names it as a launch attribute)."""
    from cuda.bindings import runtime as rt

    ids = rt.cudaStreamAttrID
    return getattr(ids, "cudaStreamAttributeAccessPolicyWindow", None) or ids.cudaLaunchAttributeAccessPolicyWindow


def l2_state(stream: torch.cuda.Stream) -> tuple[int, int]:
    """(persisting-L2 limit in bytes, access-policy window bytes on ``stream``)."""
    from cuda.bindings import runtime as rt

    err, limit = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
    if err != rt.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaDeviceGetLimit: {err}")
    attr = stream_policy_window_attribute()
    err, value = rt.cudaStreamGetAttribute(stream.cuda_stream, attr)
    if err != rt.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaStreamGetAttribute: {err}")
    return int(limit), int(value.accessPolicyWindow.num_bytes)


def l2_findings(before: tuple[int, int], after: tuple[int, int]) -> list[RuntimeFinding]:
    out = []
    if after[0] != before[0]:
        out.append(finding(L2_PERSISTENCE, f"the persisting-L2 limit went from {before[0]} to {after[0]} bytes"))
    if after[1] != before[1]:
        out.append(finding(L2_PERSISTENCE, f"an L2 access-policy window of {after[1]} bytes is set on the stream"))
    return out


def kernel_streams(fn: Callable[[], Any], device: torch.device) -> tuple[dict[str, int], set[int]]:
    """Run ``fn`` under the CUDA profiler: {kernel name: stream id} and the current stream's id.

    A tiny marker kernel launched first on the current stream tells which profiler stream id that is.
    """
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    marker = torch.zeros(1, device=device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marker.add_(1)
        fn()
        torch.cuda.synchronize(device)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())
    kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    if not kernels:
        return {}, set()
    current = kernels[0].get("args", {}).get("stream")
    streams = {str(e.get("name")): e.get("args", {}).get("stream") for e in kernels[1:]}
    return streams, {current}


def stream_findings(streams: dict[str, int], current: set[int]) -> list[RuntimeFinding]:
    other = sorted(name for name, s in streams.items() if s not in current)
    if not other:
        return []
    return [finding(SIDE_STREAM, f"kernel {other[0][:80]} ran on a stream other than the current one")]
