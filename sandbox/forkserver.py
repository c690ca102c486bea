"""A fork server: imports torch once, then forks one fresh worker process per job.

Starting a worker from scratch costs seconds before any work (``import torch`` took about 4 s per
job on the H200 machine); forking a process that has already imported torch, but has not touched
CUDA, costs milliseconds, and each job still gets its own process, CUDA context, session and scratch
folder. The server never runs candidate code and never initialises CUDA (a forked CUDA context is
unusable).

Protocol, over an AF_UNIX SOCK_SEQPACKET pair: the orchestrator sends one JSON request per job with
four file descriptors attached (the job's stdin pipe carrying the channel key, its stdout and stderr
files, and the verdict pipe); the server forks, and answers ``{"job_id", "pid"}``; when a worker
exits the server reaps it and sends ``{"pid", "returncode"}``. A forked worker then runs exactly
what ``python -m sandbox.worker`` runs, on the same descriptors, so both modes share one code path.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import tempfile
import traceback
from typing import Any

# Heavy imports the workers need, paid once here. None of them initialises CUDA.
import torch
import torch._dynamo  # the torch.compile reference

from sandbox import worker

N_FDS = 4  # stdin (key), stdout, stderr, verdict
MAX_MESSAGE = 1 << 16


def _preload_cupy() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return  # CPU-only machines have no cupy; CUDA candidates then fail at their own import


def _run_child(request: dict, fds: list[int], server_sock: socket.socket) -> None:
    """In the forked child: become an ordinary worker process, then run the job. Never returns."""
    server_sock.close()
    os.setsid()
    stdin_fd, stdout_fd, stderr_fd, verdict_fd = fds
    os.dup2(stdin_fd, 0)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    for fd in (stdin_fd, stdout_fd, stderr_fd):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # re-read TMPDIR
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the worker reads its key from fd 0
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    worker.main(["--job", request["job"], "--result-fd", str(verdict_fd)])
    os._exit(0)  # worker.main exits by itself; this only guards against a future change


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children at all
        if pid == 0:
            return
        sock.send(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


def serve(sock: socket.socket) -> None:
    _preload_cupy()
    try:
        sock.send(json.dumps({"ready": True}).encode())  # the imports are done: a fork from here is quick
        while True:
            ready, _, _ = select.select([sock], [], [], 0.05)
            _reap(sock)
            if not ready:
                continue
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, N_FDS)
            if not data:
                return  # the orchestrator closed its end: shut down
            _fork(sock, json.loads(data), fds)
    except (BrokenPipeError, ConnectionResetError):
        return  # the orchestrator went away while it was being answered (a Ctrl-C): shut down all the same


def _fork(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    if torch.cuda.is_initialized():  # a child would inherit an unusable CUDA context
        raise RuntimeError("the fork server initialised CUDA; it must not")
    pid = os.fork()
    if pid == 0:
        try:
            _run_child(request, fds, sock)
        except BaseException:  # the set-up failed: say why on the job's stderr, then exit 70
            traceback.print_exc()
        os._exit(70)
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"job_id": request["job_id"], "pid": pid}).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.forkserver")
    parser.add_argument("--fd", type=int, required=True, help="the inherited SOCK_SEQPACKET end")
    args = parser.parse_args(argv)
    serve(socket.socket(fileno=args.fd))


if __name__ == "__main__":
    main()
