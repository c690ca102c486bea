"""The candidate in the process that runs it, under watch: built, called, its calls' side effects looked for.

``CandidateSide`` is what a job's checks ask of the candidate (a watched call, a rerun with freed memory prepared,
the streams its kernels ran on, what changed in the harness). It lives in the runner (``sandbox.runner``) where the
job has one, and in the worker itself on the paths not yet split (CUDA jobs). Its findings come from the process
the candidate runs in, so a candidate can silence them there: they add rejections, and their absence proves
nothing. What decides a verdict (the inputs, the answers, the comparison, the clock) is the judge's.
"""

from __future__ import annotations

import resource
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from sandbox.failures import JobFailed, candidate_code, describe, set_candidate
from tools import correctness, runtime_checks
from tools.cheat_tricks import RESULT_CACHE
from tools.problem import build_model, copy_state, import_source
from tools.protocol import RuntimeFinding
from tools.runtime_checks import AuditWatch, HarnessSnapshot, OpRecorder

OUTPUT_LIMIT_BYTES = 256 << 20  # a candidate flooding stdout or disk is killed by SIGXFSZ


def limit_output() -> None:
    """From here on a file written past OUTPUT_LIMIT_BYTES kills the process (SIGXFSZ). Set in the process that runs
    candidate code, before any exists, and after the worker parked its answers, which may take more than that
    (``tools.answers``)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))


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


Memory = tuple[str, Any]  # how freed memory is left before a rerun: ("poisoned", value) or ("primed", answers)


class CandidateSide:
    """The candidate's ``ModelNew``, built in this process, and every call of it the checks make."""

    def __init__(
        self,
        candidate: nn.Module,
        watch: Watch,
        device: torch.device,
        like: list[torch.Tensor],
        synchronize: Callable[[], None],
        chunk: int,
    ) -> None:
        self.candidate, self.watch, self.device, self.like = candidate, watch, device, like
        self.synchronize, self.chunk = synchronize, chunk
        self.ops = OpRecorder()
        # The last call's outputs' storages, weakly: an output on one of them still alive (held by the candidate, as
        # the harness lets go of every output before the next call) is memory returned twice. A freed one may come
        # back from the allocator, which is no reuse of the candidate's.
        self._previous: list[tuple[StorageWeakRef, int]] = []

    @classmethod
    def load(
        cls,
        source: str,
        name: str,
        reference_cls: type,
        init: list[Any],
        parameters: dict[str, torch.Tensor],
        device: torch.device,
        seed: int,
        like: list[torch.Tensor],
        synchronize: Callable[[], None],
        chunk: int,
    ) -> tuple[CandidateSide, int, list[RuntimeFinding]]:
        """Import the candidate, build its ``ModelNew`` from the seed, copy ``parameters`` (the reference's) into
        it: the side, how many parameters were copied, and what the import changed in the harness."""
        set_candidate(source, name)
        watch = Watch(device, name)
        try:
            with candidate_code("importing the candidate"), watch.audit.on():
                module = import_source(source, name, "candidate")
                model_cls = getattr(module, "ModelNew", None)
                if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
                    raise JobFailed("runtime_error", "the candidate defines no `ModelNew` nn.Module subclass")
                candidate = build_model(model_cls, init, device, seed)
                copied = copy_state(parameters, candidate)
        except JobFailed as failed:
            failed.findings = watch.changes()  # a trick that failed (a frame read that found nothing) is still one
            raise
        found = watch.changes() + runtime_checks.inherited_reference(model_cls, reference_cls)
        return cls(candidate, watch, device, like, synchronize, chunk), copied, found

    def call(self, inputs: list[Any], what: str, poison_value: float = float("nan")) -> tuple[list[Any], list[Any]]:
        """One watched call on ``inputs`` after poisoning freed memory: its flattened outputs and the findings."""
        recorder = OpRecorder()

        def recorded(*args: Any) -> Any:
            # Only the candidate's own call is recorded, not the watch's snapshot and comparison around it: the
            # library exemption (cheat_tricks.library_family) reads every op the candidate ran in torch.
            with recorder:
                return self.candidate(*args)

        poisoned = runtime_checks.poisoned(self.device, self.like, poison_value)
        with poisoned, candidate_code(what), torch.no_grad(), self.watch.audit.on():
            out, found = runtime_checks.watch_call(
                recorded, inputs, self.device, self.synchronize, self.watch.threads, self.watch.children, self.chunk
            )
        self.ops.ops.update(recorder.ops)
        self.ops.low_dtypes.update(recorder.low_dtypes)
        outs = correctness.flatten_outputs(out)
        del out
        held = {ptr for ref, ptr in self._previous if not ref.expired()}
        tensors = [t for t in outs if isinstance(t, torch.Tensor) and t.numel()]
        if held & {t.untyped_storage().data_ptr() for t in tensors}:
            found.append(runtime_checks.finding(RESULT_CACHE, "returned the same output memory as its previous call"))
        self._previous = [(StorageWeakRef(t.untyped_storage()), t.untyped_storage().data_ptr()) for t in tensors]
        return outs, found

    def rerun(self, inputs: list[Any], memory: Memory) -> tuple[list[Any] | None, str]:
        """A call on ``inputs`` with freed memory left as ``memory`` says: its outputs, or None and why it raised."""
        kind, value = memory
        prepared: AbstractContextManager[None] = (
            runtime_checks.poisoned(self.device, self.like, value)
            if kind == "poisoned"
            else runtime_checks.primed(self.device, value)
        )
        with prepared:
            try:
                with self.watch.audit.on(), torch.no_grad():
                    return correctness.flatten_outputs(self.candidate(*inputs)), ""
            except Exception as exc:  # the first failure stands; a rerun only names its cause when it can
                return None, describe(exc)

    def streams(self, inputs: list[Any]) -> list[RuntimeFinding]:
        """CUDA: the streams the candidate's kernels ran on, against the current one."""
        with candidate_code("running the candidate (stream check)"), torch.no_grad(), self.watch.audit.on():
            streams, current = runtime_checks.kernel_streams(lambda: self.candidate(*inputs), self.device)
        return runtime_checks.stream_findings(streams, current)

    def changes(self) -> list[RuntimeFinding]:
        return self.watch.changes()

    def fetch_ops(self) -> None:
        """``ops`` is recorded here, as the calls run: nothing to fetch."""

    def restore(self) -> None:
        """Put back the switches a candidate turned (once it is rejected, so later work in the process is sound)."""
        self.watch.snapshot.restore_switches()

    def audited(self) -> AbstractContextManager[None]:
        return self.watch.audit.on()
