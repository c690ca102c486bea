"""The runner: the one process of a job that imports and runs candidate code (docs/DESIGN.md, "The judge and the
runner").

The worker (the judge) forks it first thing, before the job's reference, answers or clock exist and before any
candidate code does, and from then on only asks: build the candidate, call it on these inputs, rerun it with freed
memory prepared so, time one call. The runner answers with outputs in shared memory and what it saw
(``sandbox.shared``); the judge compares the outputs with answers the runner never holds and times the calls with
its own clock, the runner stopped (``SIGSTOP``) whenever it is not answering, so nothing of the candidate's runs
while the judge computes or times the references.

``Runner`` is the judge's handle; ``RemoteSide`` gives it the interface of ``sandbox.candidate.CandidateSide``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from pydantic import ValidationError

from sandbox import seccomp, shared
from sandbox.candidate import CandidateSide, Memory, limit_output
from sandbox.failures import JobFailed, candidate_code, describe
from tools.cheat_tricks import GLOBAL_STATE, VERDICT_FORGERY
from tools.correctness import flatten_outputs
from tools.memory import return_freed
from tools.problem import import_source
from tools.protocol import RuntimeFinding
from tools.runtime_checks import OpRecorder, finding
from tools.timing import Timed

MIN_MS = 1e-4  # a call through the runner timed at under its round trip counts as this
PINGS = 200  # round trips timed before any candidate code exists: what a call through the socket costs by itself
_perf_counter = time.perf_counter
_PR_SET_DUMPABLE, _PR_SET_PDEATHSIG = 4, 1
RUNNER_FAILED = 70  # the runner's exit code when it could not serve (its traceback is in the job's stderr)


# ------------------------------------------------------------------------------------------------- the runner


class _Server:
    """The runner's side of the socket: one request at a time, one answer each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.side: CandidateSide | None = None
        self.inputs: dict[str, list[Any]] = {}
        self.slots: list[Any] = []  # the judge's output slots (sandbox.shared), mapped
        self.flush_buffer: torch.Tensor | None = None
        self.last: list[Any] = []  # the last timed call's outputs, until the judge fetches them
        self.device = torch.device("cpu")

    def serve(self) -> None:
        while True:
            try:
                message, fds = shared.receive_pickled(self.sock)
            except shared.Hangup:
                return
            op = message["op"]
            if op == "exit":
                return
            try:
                reply = getattr(self, f"_{op}")(message, fds)
            except JobFailed as failed:
                found = failed.findings or (self.side.changes() if self.side is not None else [])
                reply = {"failed": [failed.status, failed.reason, failed.details[-20000:]], "findings": _plain(found)}
            except Exception as exc:  # the runner's own code failed (the candidate's failures are JobFailed above)
                why = f"the candidate's process failed: {describe(exc)}"
                reply = {"failed": ["runtime_error", why, traceback.format_exc()[-20000:]]}
            shared.send_json(self.sock, reply)

    def _ping(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        return {}

    def _rebase(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Reset this process's resident-set high-water mark (the judge counts its growth from here)."""
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
        except OSError:
            return {"reset": False}
        return {"reset": True}

    def _flush(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Evict the caches from this process, as the judge's timer does before a call of its own: the call then
        finds this process's threads as a reference's call finds the judge's, just back from the flush's work."""
        if self.flush_buffer is None or self.flush_buffer.numel() * 4 != message["bytes"]:
            self.flush_buffer = torch.empty(message["bytes"] // 4, dtype=torch.float32)
        self.flush_buffer.fill_(1.0)
        return {}

    def _load(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        self.device = torch.device(message["device"])
        problem = import_source(message["problem_source"], message["problem_name"], "problem")
        state = dict(zip(message["names"], shared.attach_values(message["state"], fds), strict=True))
        like = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in message["like"]]
        self.side, copied, found = CandidateSide.load(
            message["source"],
            message["name"],
            problem.Model,
            message["init"],
            state,
            self.device,
            message["seed"],
            like,
            lambda: None,
            message["chunk"],
        )
        return {"copied": copied, "findings": _plain(found)}

    def _inputs(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        self.inputs[message["name"]] = shared.attach_values(message["slots"], fds)
        return {}

    def _outputs(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        self.slots = [shared.attach_slot(fd) for fd in fds]
        return {}

    def _values(self, message: dict[str, Any], fds: list[int]) -> list[Any]:
        given = message["inputs"]
        return self.inputs[given] if isinstance(given, str) else shared.attach_values(given, fds)

    def _call(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self.side is not None
        outs, found = self.side.call(self._values(message, fds), message["what"], message["poison"])
        reply = {"outs": self._written(outs), "findings": _plain(found)}
        del outs
        return_freed(self.device)  # as the judge does after each check: the heap's high-water mark is the job's
        return reply

    def _rerun(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self.side is not None
        kind, value = message["memory"]
        if kind == "primed":
            value = shared.attach_values(value, fds[message["primed_from"] :])
        outs, error = self.side.rerun(self._values(message, fds), (kind, value))
        if outs is None:
            return {"error": error}
        reply = {"outs": self._written(outs)}
        del outs
        return_freed(self.device)
        return reply

    def _changes(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self.side is not None
        return {"findings": _plain(self.side.changes())}

    def _ops(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self.side is not None
        return {"ops": dict(self.side.ops.ops), "low_dtypes": dict(self.side.ops.low_dtypes)}

    def _time(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self.side is not None
        self.last = []  # freed before the call, as a caller would
        with candidate_code("timing the candidate"), torch.no_grad(), self.side.audited():
            out = self.side.candidate(*self.inputs["buffers"])
        self.last = [out]
        return {}

    def _fetch(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        return {"outs": self._written(flatten_outputs(self.last[0]) if self.last else [])}

    def _written(self, outs: list[Any]) -> list[dict[str, Any]]:
        slots = self.slots
        return [shared.write_output(o, self.device, slots[i] if i < len(slots) else None) for i, o in enumerate(outs)]


def _plain(found: list[RuntimeFinding]) -> list[dict[str, Any]]:
    return [f.model_dump(mode="json") for f in found]


def _drop_capabilities() -> bool:
    """capset(2) to none at all: the runner keeps no capability in any namespace (it could otherwise trace or
    signal the judge as the owner of the job's user namespace)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted and inheritable sets of both words: empty
    return libc.capset(header, data) == 0


def _run_server(sock: socket.socket, verdict_on_stdout: bool) -> None:
    """In the forked runner: let go of everything of the judge's but the socket and the output streams, then
    serve."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the channel's key arrives on the judge's stdin: the runner never reads it
    if verdict_on_stdout:  # a container exec's verdict leaves on stdout: what the candidate prints goes to stderr
        os.dup2(2, 1)
    for fd in _open_fds():
        if fd > 2 and fd != sock.fileno():
            with contextlib.suppress(OSError):
                os.close(fd)
    os.setpgid(0, 0)  # its own group, which the judge stops and continues as one
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # out of the job's group: ends with the judge
    _drop_capabilities()
    seccomp.install()  # the group stays whole from here on: nothing of the candidate's can leave it (sandbox.seccomp)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit_output()
    _Server(sock).serve()


def _settle() -> None:
    """Before the fork, what both processes would otherwise each do once (the fork shares it): import
    torch._dynamo, which rebinds torch.manual_seed (done later in the runner, the candidate's watch would take
    it for the candidate's doing), and a dispatch mode's first use (~70 MB, the process's, not the problem's)."""
    import torch._dynamo

    with OpRecorder():
        torch.ones(2).sum()


def _open_fds() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


# ------------------------------------------------------------------------------------------------- the judge


class Runner:
    """The judge's handle on its runner: requests, the runner's stop and continue, and its end."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock = pid, sock
        self.round_trip_ms = 0.0
        self.stopped = False
        self.broken = ""  # why the socket can no longer be trusted to frame answers

    @classmethod
    def start(cls, verdict_on_stdout: bool = False) -> Runner:
        """Fork the runner. Call before any candidate code or CUDA context exists in this process: the runner is a
        copy of it. Also times the bare round trip (``PINGS``), while only harness code runs on either side.
        ``verdict_on_stdout``: this process's verdict will leave on stdout (a container exec), not the runner's."""
        _settle()
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            code = 0
            try:
                _run_server(runner_end, verdict_on_stdout)
            except BaseException:  # into the job's stderr: the judge reports the runner's exit, this says why
                traceback.print_exc()
                code = RUNNER_FAILED
            finally:
                sys.stderr.flush()
                os._exit(code)
        runner_end.close()
        # The runner is this process's copy, same user: undumpable, this process's memory and /proc files are out of
        # its reach (no ptrace, no /proc/<pid>/mem).
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        runner = cls(pid, judge_end)
        runner.round_trip_ms = runner._time_round_trip()
        return runner

    def _time_round_trip(self) -> float:
        """The median of ``PINGS`` bare calls made as a timed call is (the runner continued, asked, stopped), the
        first quarter left out as warm-up."""
        self.stop()
        times = []
        for _ in range(PINGS):
            start = _perf_counter()
            with self.running():
                self.request({"op": "ping"}, what="a ping")
            times.append((_perf_counter() - start) * 1e3)
        self.resume()
        return statistics.median(times[PINGS // 4 :])

    def request(self, message: dict[str, Any], fds: list[int] | tuple[int, ...] = (), *, what: str) -> dict[str, Any]:
        """Send one request and wait for its answer; the runner's failure raised as the judge's ``JobFailed``, and
        bytes on the socket that are no answer as a rejection: something of the candidate's wrote them."""
        if self.broken:
            raise JobFailed("rejected", self.broken)
        try:
            shared.send_pickled(self.sock, message, fds)
            reply, got = shared.receive_json(self.sock)
            shared.close_all(got)  # answers carry no files: outputs come through the judge's slots
        except shared.Garbled as exc:
            self.broken = f"{VERDICT_FORGERY}: the candidate's process wrote to its answer channel ({exc}, {what})"
            raise JobFailed("rejected", self.broken) from exc
        except (shared.Hangup, OSError) as exc:
            raise JobFailed("crashed", f"{what}: {self._gone(exc)}") from exc
        failed = reply.get("failed")
        if failed is not None:
            status, reason, details = (str(x) for x in [*(failed if isinstance(failed, list) else []), "", "", ""][:3])
            error = JobFailed(status if status == "compile_error" else "runtime_error", reason[:500], details)
            error.findings = _findings(reply.get("findings"))
            raise error
        return reply

    def _gone(self, exc: BaseException) -> str:
        """Why the runner stopped answering: its ending where it has ended."""
        with contextlib.suppress(ChildProcessError):
            for _ in range(50):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.pid = 0
                    if os.WIFSIGNALED(status):
                        return f"the candidate's process was killed by {signal.Signals(os.WTERMSIG(status)).name}"
                    code = os.waitstatus_to_exitcode(status)
                    return f"the candidate's process exited with code {code} before it answered (no verdict of its own)"
                time.sleep(0.01)
        return f"the candidate's process stopped answering ({exc})"

    def rebase(self) -> None:
        """Have the runner reset its resident-set high-water mark, so its peak is counted from now."""
        self.request({"op": "rebase"}, what="resetting the runner's memory mark")

    def stop(self) -> None:
        """Stop the runner's whole process group: its threads and children cannot run while the judge works."""
        if self.pid and not self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGSTOP)
            self.stopped = True

    def resume(self) -> None:
        if self.pid and self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGCONT)
            self.stopped = False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The runner continued for the requests inside, stopped again after."""
        self.resume()
        try:
            yield
        finally:
            self.stop()

    def close(self) -> None:
        """End the runner's process group (the judge's result does not wait for it)."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0
        self.sock.close()


def _findings(values: Any) -> list[RuntimeFinding]:
    """The runner's findings, validated as records (a malformed one is itself a finding of tampering)."""
    try:
        return [RuntimeFinding.model_validate(v) for v in values or []]
    except ValidationError:
        return [finding(GLOBAL_STATE, "the candidate's process sent malformed findings")]


class RemoteSide:
    """The candidate in the runner, behind the interface of ``CandidateSide``: outputs come back as tensors in the
    judge's own memory, findings as validated records."""

    def __init__(self, runner: Runner, device: torch.device, slot_bytes: list[int]) -> None:
        self.runner, self.device = runner, device
        self.ops = OpRecorder()
        self._buffers: list[Any] | None = None
        made = [shared.make_slot(n) for n in slot_bytes]
        self.slots = [buffer for buffer, _ in made]
        fds = [fd for _, fd in made]
        try:
            runner.request({"op": "outputs"}, fds, what="sending the output slots")
        finally:
            shared.close_all(fds)

    @classmethod
    def load(
        cls,
        runner: Runner,
        source: str,
        name: str,
        problem_source: str,
        problem_name: str,
        init: list[Any],
        state: dict[str, torch.Tensor],
        device: torch.device,
        seed: int,
        like: list[torch.Tensor],
        chunk: int,
        slot_bytes: list[int],
    ) -> tuple[RemoteSide, int, list[RuntimeFinding]]:
        """Have the runner build the candidate (``CandidateSide.load`` there), with one output slot of
        ``slot_bytes[i]`` for each output ``i``."""
        _, slots, fds = shared.share_values(list(state.values()))
        message = {
            "op": "load",
            "source": source,
            "name": name,
            "problem_source": problem_source,
            "problem_name": problem_name,
            "init": init,
            "names": list(state),
            "state": slots,
            "device": str(device),
            "seed": seed,
            "like": [(tuple(t.shape), t.dtype) for t in like],
            "chunk": chunk,
        }
        try:
            reply = runner.request(message, fds, what="importing the candidate")
        finally:
            shared.close_all(fds)
        copied = reply.get("copied")
        side = cls(runner, device, slot_bytes)
        return side, copied if type(copied) is int else 0, _findings(reply.get("findings"))

    def share_buffers(self, buffers: list[Any]) -> None:
        """Move the judge's one input set into shared memory, in place (the judge keeps refilling the same tensors),
        and map it in the runner."""
        values, slots, fds = shared.share_values(buffers)
        buffers[:] = values
        self._buffers = buffers
        try:
            self.runner.request({"op": "inputs", "name": "buffers", "slots": slots}, fds, what="sending the inputs")
        finally:
            shared.close_all(fds)

    def _inputs(self, inputs: list[Any]) -> tuple[Any, list[int]]:
        if inputs is self._buffers:
            return "buffers", []
        _, slots, fds = shared.share_values(inputs)
        return slots, fds

    def _outputs(self, reply: dict[str, Any]) -> list[Any]:
        metas = reply.get("outs")
        metas = metas[: len(self.slots) + 16] if isinstance(metas, list) else []
        return [
            shared.read_output(m, self.slots[i] if i < len(self.slots) else None, self.device)
            for i, m in enumerate(metas)
        ]

    def call(self, inputs: list[Any], what: str, poison_value: float = float("nan")) -> tuple[list[Any], list[Any]]:
        given, fds = self._inputs(inputs)
        try:
            reply = self.runner.request(
                {"op": "call", "inputs": given, "what": what, "poison": poison_value}, fds, what=what
            )
        finally:
            shared.close_all(fds)
        return self._outputs(reply), _findings(reply.get("findings"))

    def rerun(self, inputs: list[Any], memory: Memory) -> tuple[list[Any] | None, str]:
        given, fds = self._inputs(inputs)
        kind, value = memory
        message = {"op": "rerun", "inputs": given, "memory": (kind, value), "primed_from": len(fds)}
        if kind == "primed":
            _, slots, primed = shared.share_values(value)
            message["memory"] = (kind, slots)
            fds = fds + primed
        try:
            reply = self.runner.request(message, fds, what="rerunning the candidate")
        finally:
            shared.close_all(fds)
        if "error" in reply:
            return None, str(reply["error"])[:500]
        return self._outputs(reply), ""

    def streams(self, inputs: list[Any]) -> list[RuntimeFinding]:
        raise NotImplementedError("CUDA jobs run their candidate in the worker until the runner is verified on a GPU")

    def changes(self) -> list[RuntimeFinding]:
        reply = self.runner.request({"op": "changes"}, what="asking what the candidate changed")
        return _findings(reply.get("findings"))

    def fetch_ops(self) -> None:
        """The ops the candidate ran in torch, as the runner recorded them (for the library exemption's findings)."""
        reply = self.runner.request({"op": "ops"}, what="asking the candidate's ops")
        for field, counter in (("ops", self.ops.ops), ("low_dtypes", self.ops.low_dtypes)):
            values = reply.get(field)
            if isinstance(values, dict):
                counter.update({str(k)[:200]: int(v) for k, v in values.items() if type(v) is int})

    def restore(self) -> None:
        """Nothing of the judge's was changed: the candidate's process is the only one it ran in."""

    def audited(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def timed(self) -> Callable[..., Any]:
        """The candidate as a contender the judge times: one call on the shared input set per request, the runner
        continued for it and stopped again, as the bare round trip (``Runner.round_trip_ms``) was timed. Stop the
        runner before timing starts: it then runs only inside these calls."""

        def call(*inputs: Any) -> None:
            with self.runner.running():
                self.runner.request({"op": "time"}, what="timing the candidate")

        return call

    def fetch_last(self) -> list[Any]:
        """The outputs of the last timed call, in the judge's memory."""
        reply = self.runner.request({"op": "fetch"}, what="fetching the candidate's last output")
        return self._outputs(reply)


class RoundTripTimer:
    """The judge's timer, which times a call of the runner's candidate less the bare round trip its request and
    answer cost (``Runner.round_trip_ms``, timed before the candidate existed, so the candidate cannot inflate it),
    and every other contender as it is: each side then counts its call alone."""

    def __init__(self, timer: Any, remote: Callable[..., Any], runner: Runner) -> None:
        self.inner, self.remote, self.runner, self.round_trip_ms = timer, remote, runner, runner.round_trip_ms
        self.pending = False  # a flush asked for and not yet made
        self.method: str = timer.method
        self.flush_bytes: int = timer.flush_bytes

    def flush(self) -> None:
        """Deferred to the call it comes before: made by the process that makes the call."""
        self.pending = True

    def release_between_trials(self) -> None:
        self.inner.release_between_trials()

    def synchronize(self) -> None:
        self.inner.synchronize()

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> Any:
        flush, self.pending = self.pending, False
        if fn is not self.remote:
            if flush:
                self.inner.flush()
            return self.inner.time_call(fn, args)
        if flush:
            with self.runner.running():
                self.runner.request({"op": "flush", "bytes": self.flush_bytes}, what="flushing the caches")
        timed = self.inner.time_call(fn, args)
        return Timed(
            max(timed.ms - self.round_trip_ms, MIN_MS), max(timed.host_ms - self.round_trip_ms, MIN_MS), timed.out
        )
