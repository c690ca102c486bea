"""Namespaces for a local job: what the worker and the candidate's code can see of the host and change on it.

``enter`` runs first thing in a local job's worker (``sandbox.worker.main``, in both ways the backend starts one). It
gives the job its own PID, network, IPC and mount namespaces, inside a user namespace where this process is not
root:

- **PID**: the worker is process 1 of a namespace of its own. Host processes cannot be seen or signalled, and when
  the worker ends the kernel kills every process left in it, a ``setsid`` daemon included.
- **mount**: a fresh ``/proc`` of that namespace (no other process's ``environ``, no kforge process to read a key
  from), and a fresh, size-capped ``/dev/shm``, gone with the job.
- **network**: a namespace with only a loopback interface, down: no connection to the host's listeners, on
  127.0.0.1 or anywhere else.
- **IPC**: System V objects and POSIX message queues of its own.

A job that will run candidate code (``REQUEST`` is ``"candidate"``) also gets, before any of the job is read:

- **a disk limit**: its scratch folder, the one place it may write, is a tmpfs of the configured size
  (``LocalSandboxConfig.disk``) holding what the folder held; a write past it fails with ENOSPC, and nothing the job
  writes reaches the host's disk;
- **read-only files** but its scratch folder: every other mount is remounted read-only in its namespace (the
  project, other runs, the shared caches), and the kernel then locks those flags: the job continues in a nested user
  and mount namespace, where a mount inherited from its parent cannot be made writable again, and no program it
  starts may gain privileges;
- **its own /dev**: the few devices a job uses (null, zero, random, the GPU's), so no disk or other host device is
  there to open;
- **an unprivileged user**: a job started by root continues as ``NOBODY`` (``_unprivileged``), so it reads only
  what any user may; folders that others may not enter on the way to its interpreter and modules are opened to it
  in its namespace, with nothing else of theirs in view;
- **a process limit** (``RLIMIT_NPROC``, hard): the kernel counts a user's tasks per user namespace, and the job's
  nested one holds only the job, so the limit is the job's own however many processes its user has elsewhere; root
  inside it is not exempt (the exemption is for root of the host's namespace).

A CPU job also gets a **memory limit** (``RLIMIT_DATA``, hard: its private writable memory, which is where tensors
live; an allocation past it fails as out of memory). Not CUDA jobs: the driver maps far more than it uses.

Where the kernel refuses a namespace, the job runs without them and says so in its result
(``environment["containment"]``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 0x400, 0x800, 0x1000, 0x4000, 0x40000
MS_RELATIME, MS_STRICTATIME = 0x200000, 0x1000000
# The flags a bind remount must repeat: inside a user namespace the kernel refuses to clear them.
_KEPT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
SHM_SIZE = "256m"  # the job's /dev/shm; scratch files belong in its scratch folder
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
REQUEST = "KFORGE_CONTAIN"  # "1": the worker contains itself first (sandbox.worker.main); "candidate": and locks
LIMITS = "KFORGE_LIMITS"  # "<tasks>,<bytes>,<bytes>": the job's process, memory and disk limits (0: none)
ENV = "KFORGE_CONTAINMENT"  # what enter() gave the job: "pid,mount,network,ipc", or "off: <why>"
LIMITED = "KFORGE_LIMITED"  # the limits enter() set: "tasks<=512,data<=12.0GiB", or "off: <why>"
NAMESPACES = "pid,mount,network,ipc"
LOCKED = "read-only but scratch,own /dev,unprivileged"
# Where compilers a candidate may call keep their caches: in its scratch folder, for a candidate's job.
CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "TORCH_EXTENSIONS_DIR")
BACKEND_FILES = ("stdout.txt", "stderr.txt")  # in a scratch folder: the backend's, written through descriptors
NOBODY = 65534  # the user a candidate's job started by root runs as: the overflow id, which owns no file

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


def _unshare_mapped(flags: int, what: str) -> None:
    """``unshare(flags | CLONE_NEWUSER)``, the new user namespace mapping this process's ids onto themselves (the one
    mapping a process may write for itself)."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags | CLONE_NEWUSER), what)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _unshare() -> None:
    """The namespaces; inside a user namespace where this process is not root (user namespaces give an
    unprivileged process the right to make the others)."""
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
    if os.geteuid() == 0:
        _check(_libc.unshare(flags), "unshare")
    else:
        _unshare_mapped(flags, "unshare")


def _wait_and_mirror(pid: int) -> None:
    """In the process left outside the new PID namespace: wait for the worker and end as it ended (its exit code, or
    its signal), so the orchestrator sees the worker's own ending. Holds no descriptor meanwhile: the job's pipes must
    close when the worker ends, and a new interpreter's parent waits for its exec pipe to close."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the orchestrator ends a job with SIGKILL to its whole group
    _, status = os.waitpid(pid, 0)  # retried by Python across signals (PEP 475)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


def _mount_points() -> list[tuple[str, int]]:
    """This namespace's mount points, parents first, each with the flags a remount of it must keep."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # fields[4]: the mount point (octal escapes for spaces), fields[5]: the per-mount options
            point = fields[4].encode().decode("unicode_escape")
            flags = 0
            for option in fields[5].split(","):
                flags |= _KEPT_FLAGS.get(option, 0)
            out.append((point, flags))
    return out


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _read_only_but(scratch: str, disk: int) -> None:
    """Every mount read-only in this namespace but ``scratch``, which gets a writable mount of its own: a tmpfs of
    ``disk`` bytes (``_capped``; 0: the folder itself, bound writable). The host's /tmp stays in view, read-only like
    the rest: a virtual environment or a checkout may live there, and the job's ``$TMPDIR`` is in its scratch folder."""
    if disk:
        _capped(scratch, disk)
    else:
        _mount(scratch, scratch, None, MS_BIND | MS_REC)
    for point, flags in _mount_points():
        if _within(point, "/proc") or _within(point, scratch):
            continue  # /proc is replaced below; scratch stays writable
        try:
            _mount("none", point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
        except ContainmentError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES):  # a mount point it cannot reach is not a file it can
                raise


def _capped(scratch: str, disk: int) -> None:
    """``scratch`` as a tmpfs of ``disk`` bytes holding what the folder held (the job's file, its empty ``$TMPDIR``):
    whatever the job writes, compilers' caches included, lives there, and a write past ``disk`` fails with ENOSPC
    instead of filling the host's disk. Gone with the namespace; the host reads nothing the job wrote there (its
    output goes to descriptors the backend opened). The process moves into the new mount: its working folder was the
    one now covered."""
    held = os.open(scratch, os.O_PATH | os.O_DIRECTORY)
    try:
        _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk},mode=0700")
        source = f"/proc/self/fd/{held}"
        for name in os.listdir(source):
            if os.path.isdir(f"{source}/{name}"):
                shutil.copytree(f"{source}/{name}", f"{scratch}/{name}", symlinks=True)
            elif os.path.isfile(f"{source}/{name}") and name not in BACKEND_FILES:
                shutil.copy2(f"{source}/{name}", f"{scratch}/{name}")
    finally:
        os.close(held)
    os.chdir(scratch)


def _lock() -> None:
    """Make the read-only mounts final: continue in a nested user and mount namespace (the ids mapped one to one),
    where the kernel locks the flags of every mount inherited from the parent, so not even root inside can make one
    writable again; and no program the job starts may gain privileges (a set-uid binary runs as the job's user)."""
    _unshare_mapped(CLONE_NEWNS, "unshare (lock)")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _own_dev() -> None:
    """A /dev of the few devices a job uses (null, zero, full, random, urandom, tty, and the GPU's where there is
    one), read-only: no disk or other host device is there to open."""
    names = [n for n in ("null", "zero", "full", "random", "urandom", "tty") if os.path.exists(f"/dev/{n}")]
    names += sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and not os.path.isdir(f"/dev/{n}"))
    held = {n: os.open(f"/dev/{n}", os.O_PATH) for n in names}
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "size=1m,mode=0755")
    for name, fd in held.items():
        with open(f"/dev/{name}", "w"):
            pass
        _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    os.mkdir("/dev/shm")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"/dev/{name}")
    os.symlink("/proc/self/fd/2", "/dev/stderr")
    _mount("none", "/dev", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _needed() -> set[str]:
    """What a job reads as it runs: its interpreter, standard library, packages and modules, the libraries it loads
    by path, and kforge's cache; each as given and as resolved (a virtual environment's interpreter links to one
    elsewhere)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable, *sys.path}
    paths.update(os.environ.get("LD_LIBRARY_PATH", "").split(":"))
    paths.update(os.environ.get(var, "") for var in ("KFORGE_CACHE_DIR", "CUDA_HOME", "CUDA_PATH"))
    paths = {os.path.abspath(p) for p in paths if p and os.path.exists(p)}
    return paths | {os.path.realpath(p) for p in paths}


def _ancestors(path: str) -> list[str]:
    parts = path.rstrip("/").split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts) + 1)]


def _reachable(paths: set[str], scratch: str) -> None:
    """Every folder on the way to ``paths`` and to the job's ``scratch`` folder that other users may not enter (a home
    folder of mode 0700 that holds the interpreter, a checkout in a ``mktemp -d`` folder, a Ray worker's folder of
    jobs) is covered, in this namespace, by a read-only tmpfs of mode 0755 holding only the entries on the way (all
    of them, for a folder in ``paths`` itself), each bound from the original. The job, run as ``NOBODY``, reaches
    what it needs to run and nothing else of those folders: their other files, readable to anyone by their own mode
    but kept private by the folder's, stay out of sight."""
    wanted = {a for p in {*paths, scratch} for a in _ancestors(p)}
    closed = [d for d in wanted if not _within(d, scratch) and os.path.isdir(d) and not os.stat(d).st_mode & 0o001]
    for folder in sorted(closed, key=_depth):
        if folder in paths:  # needed itself (a checkout on sys.path): all of it, as any user would see it
            keep = sorted(os.listdir(folder))
        else:
            keep = sorted({w[len(folder) + 1 :].split("/")[0] for w in wanted if w.startswith(folder + "/")})
        held = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:
            _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
            for name in keep:
                source, target = f"/proc/self/fd/{held}/{name}", f"{folder}/{name}"
                if os.path.islink(source):
                    os.symlink(os.readlink(source), target)
                    continue
                if os.path.isdir(source):
                    os.mkdir(target)
                else:
                    open(target, "w").close()
                _mount(source, target, None, MS_BIND | MS_REC)
            _mount("none", folder, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        finally:
            os.close(held)


def _depth(path: str) -> int:
    return path.count("/")


def _unprivileged(scratch: str) -> None:
    """A job started by root continues as ``NOBODY``, with no groups and no capabilities: it reads only what any user
    may (what it needs made reachable first), and the process limit applies to it (root is exempt). Its scratch
    folder becomes its own. A job started by another user already runs without privileges."""
    if os.geteuid() != 0:
        return
    _reachable({p for p in _needed() if not _within(p, scratch)}, scratch)  # sys.path holds the scratch, its cwd
    for folder, dirs, files in os.walk(scratch):
        for path in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.lchown(path, NOBODY, NOBODY)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    # A change of user makes the process undumpable, which hands its /proc files to root: it could no longer write
    # the uid map of the namespace that locks its mounts.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def _inside(candidate: bool) -> str:
    """In process 1 of the new namespaces: its own /proc and /dev/shm; for a candidate's job, read-only files but its
    scratch folder, its own /dev, an unprivileged user, locked. What it got, or what the kernel refused (a container's
    masked /proc may forbid a new one)."""
    scratch = os.getcwd()
    if candidate and not _is_scratch(scratch):
        return f"{NAMESPACES}; lock off: {scratch} is not a job's scratch folder"
    try:
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        if candidate:
            _read_only_but(scratch, _limits()[2])
            _own_dev()
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if os.path.isdir("/dev/shm"):
            _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={SHM_SIZE},mode=1777")
    except ContainmentError as exc:
        return f"pid,network,ipc; mount off: {exc.strerror}"
    if not candidate:
        return NAMESPACES
    try:
        _unprivileged(scratch)
        _lock()
    except OSError as exc:
        return f"{NAMESPACES}; lock off: {exc.strerror or exc}"
    for var in CACHES:  # the shared ones are read-only to it, or out of its reach
        os.environ[var] = os.path.join(scratch, "cache", var.lower())
    return f"{NAMESPACES},{LOCKED}"


def _limits() -> tuple[int, int, int]:
    """The process, memory and disk limits ``LIMITS`` asks for (0: none; all 0 where it is not set)."""
    spec = os.environ.get(LIMITS)
    tasks, memory, disk = (int(x) for x in spec.split(",")) if spec else (0, 0, 0)
    return tasks, memory, disk


def _limit(nested: bool) -> str:
    """Set the hard limits ``LIMITS`` asks for; what was set. ``nested``: this process is alone in a user
    namespace of its own (``_lock`` made it), where ``RLIMIT_NPROC`` counts the job's tasks alone; elsewhere it would
    count every process of its user on the host, and is left as it is. The disk limit is the scratch folder's size
    (``_capped``); the size of the files the candidate's process writes, its output included, is bounded where it runs
    (``sandbox.candidate.limit_output``: the judge's own shared-memory files may be larger)."""
    tasks, memory, disk = _limits()
    done = []
    if nested:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
        done.append(f"tasks<={tasks}")
        if disk:  # the locked job's scratch is the tmpfs of that size
            done.append(f"scratch<={disk / (1 << 30):.1f}GiB")
    if memory:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        done.append(f"data<={memory / (1 << 30):.1f}GiB")
    return ",".join(done) or "off: no user namespace of the job's own"


def _is_scratch(path: str) -> bool:
    """A folder the backend made for one job (``kforge-*``, this user's alone): the only one ever handed over."""
    info = os.stat(path)
    return os.path.basename(path).startswith("kforge-") and info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0


def enter(candidate: bool = False) -> str:
    """Contain the calling process, and return (in the contained one) what it got, also left in ``$KFORGE_CONTAINMENT``.

    Forks: the caller's process stays outside the new PID namespace, waits for the contained one and exits as it
    does; ``enter`` returns only in the contained process (PID 1 of its namespace). ``candidate``: the job will run
    candidate code, and gets read-only files but its scratch folder and its own /dev too. Where the kernel refuses,
    nothing has changed and it returns ``"off: <why>"`` in the caller's process.
    """
    try:
        _unshare()
    except OSError as exc:  # reported in the job's result: the run says which guarantee is off
        state = "off: namespaces not permitted here" if exc.errno == errno.EPERM else f"off: {exc.strerror or exc}"
        os.environ[ENV] = state
        if os.environ.get(LIMITS):
            os.environ[LIMITED] = _limit(nested=False)
        return state
    pid = os.fork()
    if pid:
        _wait_and_mirror(pid)
    state = _inside(candidate)
    os.environ[ENV] = state
    if os.environ.get(LIMITS):
        os.environ[LIMITED] = _limit(nested=state.endswith(LOCKED))
    return state


def in_child(fn: Callable[[], str]) -> str:
    """What ``fn`` says when run in a forked child, so that what it changes for good (namespaces, a seccomp filter)
    leaves this process as it is; "" where the child ended without a word."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child says what it got; a waiter of enter's closes its own copy of the pipe
        os.close(read_fd)
        try:
            os.write(write_fd, fn().encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


def probe() -> str:
    """What a candidate's job would get on this machine: ``NAMESPACES`` and ``LOCKED``, or what is off and why.
    Tried in a child process (from a scratch folder of its own), so this one stays as it is."""
    scratch = tempfile.mkdtemp(prefix="kforge-probe-")

    def contained() -> str:
        os.chdir(scratch)
        return enter(candidate=True)

    said = in_child(contained)
    shutil.rmtree(scratch)
    return said or "off: the probe ended without an answer"
