"""Namespaces for a local job: what the worker and the candidate's code can see of the host.

``enter`` runs in a job's process just before the worker starts (the fork server's child, or ``preexec_fn`` of a new
interpreter). It gives the job its own PID, network, IPC and mount namespaces, inside a user namespace where this
process is not root:

- **PID**: the worker is process 1 of a namespace of its own. Host processes cannot be seen or signalled, and when
  the worker ends the kernel kills every process left in it, a ``setsid`` daemon included.
- **mount**: a fresh ``/proc`` of that namespace (no other process's ``environ``, no kforge process to read a key
  from) and a fresh, size-capped ``/dev/shm``, both gone with the job.
- **network**: a namespace with only a loopback interface, down: no connection to the host's listeners, on
  127.0.0.1 or anywhere else.
- **IPC**: System V objects and POSIX message queues of its own.

The files the job can write are not narrowed here (the project, other runs, the caches): that needs a separate
user, which ``docs/DESIGN.md`` plans. Where the kernel refuses a namespace, the job runs without them and says so in
its result (``environment["containment"]``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
SHM_SIZE = "256m"  # the job's /dev/shm; scratch files belong in its scratch folder
REQUEST = "KFORGE_CONTAIN"  # "1": the worker contains itself first (sandbox.worker.main)
ENV = "KFORGE_CONTAINMENT"  # what enter() gave the job: "pid,mount,network,ipc", or "off: <why>"
NAMESPACES = "pid,mount,network,ipc"

_libc = ctypes.CDLL(None, use_errno=True)


class ContainmentError(OSError):
    """The kernel refused a step of the containment."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise ContainmentError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    kind, options = (fstype.encode() if fstype else None), (data.encode() if data else None)
    _check(_libc.mount(source.encode(), target.encode(), kind, flags, options), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _unshare() -> None:
    """The namespaces; inside a user namespace that maps this process's ids onto themselves where it is not root
    (user namespaces give an unprivileged process the right to make the others)."""
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
    if os.geteuid() == 0:
        _check(_libc.unshare(flags), "unshare")
        return
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags | CLONE_NEWUSER), "unshare")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _wait_and_mirror(pid: int) -> None:
    """In the process left outside the new PID namespace: wait for the worker and end as it ended (its exit code, or
    its signal), so the orchestrator sees the worker's own ending. Holds no descriptor meanwhile: the job's pipes must
    close when the worker ends, and a new interpreter's parent waits for its exec pipe to close."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the orchestrator ends a job with SIGKILL to its whole group
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


def _inside() -> str:
    """In process 1 of the new namespaces: its own /proc and /dev/shm, not shared with the host's mounts. What it
    got, or what the kernel refused (a container's masked /proc may forbid a new one)."""
    try:
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if os.path.isdir("/dev/shm"):
            _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={SHM_SIZE},mode=1777")
    except ContainmentError as exc:
        return f"pid,network,ipc; mount off: {exc.strerror}"
    return NAMESPACES


def enter() -> str:
    """Contain the calling process, and return (in the contained one) what it got, also left in ``$KFORGE_CONTAINMENT``.

    Forks: the caller's process stays outside the new PID namespace, waits for the contained one and exits as it
    does; ``enter`` returns only in the contained process (PID 1 of its namespace). Where the kernel refuses, nothing
    has changed and it returns ``"off: <why>"`` in the caller's process.
    """
    try:
        _unshare()
    except OSError as exc:  # reported in the job's result: the run says which guarantee is off
        state = "off: namespaces not permitted here" if exc.errno == errno.EPERM else f"off: {exc.strerror or exc}"
        os.environ[ENV] = state
        return state
    pid = os.fork()
    if pid:
        _wait_and_mirror(pid)
    state = _inside()
    os.environ[ENV] = state
    return state


def probe() -> str:
    """What a job would get on this machine: ``NAMESPACES``, or what is off and why. Tried in a child process, so
    this one stays as it is."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: contained (or not), it says what it got; its waiter closes its copy of the pipe
        os.close(read_fd)
        try:
            os.write(write_fd, enter().encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said or "off: the probe ended without an answer"
