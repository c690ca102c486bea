"""The orchestrator's side of the fork server (``sandbox/forkserver.py``).

``ForkServerClient.spawn`` hands a job's descriptors to the server and returns a handle that waits
like ``subprocess.Popen``: ``pid``, ``wait(timeout)``, ``returncode``. One client serves many jobs
at once; a dead server fails the jobs in flight (as crashed) and is restarted by the next job.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import structlog

log = structlog.get_logger(__name__)
START_TIMEOUT_S = 120.0  # the server imports torch before it answers the first request


class ForkServerDied(Exception):
    """The fork server exited; the jobs it was running have no exit status."""


class ForkedProcess:
    """A worker forked by the server; waits like subprocess.Popen."""

    def __init__(self, client: ForkServerClient, pid: int) -> None:
        self._client, self.pid = client, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = self._client.wait_exit(self.pid, timeout)
        return self.returncode


class ForkServerClient:
    def __init__(self, python: str, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [python, "-m", "sandbox.forkserver", "--fd", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self._sock = ours
        self._cond = threading.Condition()
        self._started: dict[str, int] = {}
        self._exited: dict[int, int] = {}
        self._dead = False
        self._ready = False
        self._send_lock = threading.Lock()
        self._events = threading.Thread(target=self._read_events, name="forkserver-events", daemon=True)
        self._events.start()

    @property
    def alive(self) -> bool:
        return not self._dead and self._proc.poll() is None

    def _read_events(self) -> None:
        try:
            while data := self._sock.recv(1 << 16):
                event = json.loads(data)
                with self._cond:
                    if "ready" in event:
                        self._ready = True
                    elif "job_id" in event:
                        self._started[event["job_id"]] = event["pid"]
                    else:
                        self._exited[event["pid"]] = event["returncode"]
                    self._cond.notify_all()
        except OSError as exc:
            log.warning("forkserver_socket_error", error=str(exc))
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    def _wait_for(self, predicate, timeout: float | None):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (value := predicate()) is None:
                if self._dead:
                    raise ForkServerDied("the fork server exited")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise subprocess.TimeoutExpired("forked worker", timeout or 0)
                self._cond.wait(remaining)
            return value

    @property
    def ready(self) -> bool:
        """Has the server made its imports?"""
        return self._ready

    def wait_ready(self) -> None:
        """Wait until the server has made its imports (the first request waits for them otherwise)."""
        self._wait_for(lambda: True if self._ready else None, START_TIMEOUT_S)

    def spawn(self, job_id: str, request: dict, fds: list[int]) -> ForkedProcess:
        with self._send_lock:
            socket.send_fds(self._sock, [json.dumps({**request, "job_id": job_id}).encode()], fds)
        pid = self._wait_for(lambda: self._started.pop(job_id, None), START_TIMEOUT_S)
        return ForkedProcess(self, pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int:
        return self._wait_for(lambda: self._exited.pop(pid, None), timeout)

    def close(self) -> None:
        # Shut the socket down, let the events thread read its end, and only then close it: closed under
        # the thread, its next recv would fail on a closed descriptor (EBADF, reported as an error).
        self._sock.shutdown(socket.SHUT_RDWR)
        self._events.join(timeout=10)
        self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
