"""How a job ends early: ``JobFailed`` and the wrapper that turns a candidate's exception into one.

Shared by the judge (``sandbox.worker``) and the runner (``sandbox.runner``): the runner reports a failure of the
candidate's as a status, a reason and details, which the judge raises again as its own ``JobFailed``.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

import torch

from tools.compile import map_c_log_to_candidate
from tools.errors import CompileError
from tools.protocol import RuntimeFinding, Status


class JobFailed(Exception):
    """Ends a job early with a status; raised by the phases below, turned into a JobResult."""

    def __init__(self, status: Status, reason: str, details: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.details = status, reason, details
        self.findings: list[RuntimeFinding] = []  # what the candidate's process saw before it failed


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
        raise JobFailed(classify(exc), f"{phase}: {describe(exc)}", _from_candidate(exc)) from exc


_candidate: dict[str, str] = {}  # the job's candidate source and file name, for compile-error lines and tracebacks


def set_candidate(source: str, name: str) -> None:
    """The candidate's source and file name: for its compile errors' lines and its tracebacks' first frame."""
    _candidate.update(source=source, name=name)


def _from_candidate(exc: BaseException) -> str:
    """The traceback from the candidate's first frame on: the harness's frames above it (the worker, its watch,
    ``nn.Module.__call__``) say nothing about the candidate's error. The whole one where no frame is the
    candidate's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != _candidate.get("name"):
        tb = tb.tb_next
    if tb is None:
        return traceback.format_exc()
    return "".join(traceback.format_exception(type(exc), exc, tb))


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
