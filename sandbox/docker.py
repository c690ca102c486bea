"""The docker backend: one long-lived, locked-down container per GPU, a fresh worker process per job.

The container is started once (``sleep infinity`` under an init process) with no network, a read-only
root, a tmpfs ``/tmp``, an IPC namespace of its own, memory (sized from the host) and pid limits,
every capability dropped, no-new-privileges and a non-root user; the GPU it owns is pinned with a
device request. Each job is a ``docker exec`` of ``python -m sandbox.worker``: the job file comes
through a read-only bind mount, the channel key goes in on the exec's stdin, and the signed verdict
comes back on its stdout (the worker moves everything printed to stderr, so only it writes there;
unsigned bytes are a forgery, as with the local backend). After every job, processes it left behind
are killed and every writable place is emptied (``/tmp``, ``/dev/shm``, ``/dev/mqueue`` and System V
IPC objects), or, where that fails, the container is replaced, so no job sees what an earlier one
left; after a timeout or a sticky CUDA error the container is replaced too. A profile job (Nsight
Compute) runs in a container of its own, started for it and removed after it: the one place a job
runs as the container's root with CAP_SYS_ADMIN, which ncu needs to read the GPU's counters
(``profile_user``, ``profile_caps``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from sandbox.channel import KEY_BYTES
from sandbox.config import DockerSandboxConfig
from sandbox.devices import HostDevices
from sandbox.verdict import how_it_ended, job_verdict
from tools.errors import EnvironmentProblem
from tools.keys import redact_model
from tools.protocol import AnyJob, JobResult

log = structlog.get_logger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOBS_IN_CONTAINER = "/kforge/jobs"
GRACE_S = 5.0  # beyond the job's own timeout: interpreter start and imports
VERDICT_LIMIT = 64 << 20  # more than this on the verdict stream is not a verdict
STICKY_CUDA = ("illegal memory access", "unspecified launch failure", "misaligned address", "CUDA error: an illegal")


# Both scripts run inside the container. What a job can leave there for the next one: processes,
# entries of the only writable places (/tmp, /dev/shm, and /dev/mqueue where POSIX message queues live;
# the rest is read-only) and System V IPC objects (shared memory, semaphores, message queues), which
# live in the container's IPC namespace. Entries of /tmp that are, or hold, a mount (a checkout that lives under
# /tmp on the host) belong to the container's set-up, not to a job: they stay.
_LEFTOVERS = """
import os
WRITABLE = ("/tmp", "/dev/shm", "/dev/mqueue")
mounted = set()
for line in open("/proc/self/mounts"):
    path = line.split()[1]
    for root in WRITABLE:
        while path.startswith(root + "/"):
            mounted.add(path)
            path = os.path.dirname(path)

def entries():
    for root in WRITABLE:
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            continue
        for name in names:
            if os.path.join(root, name) not in mounted:
                yield os.path.join(root, name)

def ipc_objects():
    for kind in ("shm", "sem", "msg"):
        with open("/proc/sysvipc/" + kind) as f:
            for line in f.read().splitlines()[1:]:
                yield kind, int(line.split()[1])
"""
_CLEAN_UP = (
    _LEFTOVERS
    + """
import ctypes, shutil, signal, sys
keep = set(sys.argv[1:]) | {str(os.getpid())}
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid not in keep:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass

def remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            # A job may have left folders it made unreadable: it ran as this user, so they are ours.
            os.chmod(path, 0o700)
            for folder, subfolders, _ in os.walk(path):
                for name in subfolders:
                    if not os.path.islink(os.path.join(folder, name)):
                        os.chmod(os.path.join(folder, name), 0o700)
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except (OSError, RecursionError):
        pass  # counted below: the container is then replaced

for path in list(entries()):
    remove(path)
libc = ctypes.CDLL(None, use_errno=True)
IPC_RMID = 0
for kind, ident in list(ipc_objects()):
    if kind == "shm":
        libc.shmctl(ident, IPC_RMID, None)
    elif kind == "sem":
        libc.semctl(ident, 0, IPC_RMID)
    else:
        libc.msgctl(ident, IPC_RMID, None)
left = list(entries()) + ["sysv-%s:%d" % o for o in ipc_objects()]
if left:
    sys.exit("left behind: " + " ".join(left)[:500])
"""
)
# Its stdout is the answer: what the writable places hold (set-up mounts aside), then the pids.
_SNAPSHOT = (
    _LEFTOVERS
    + """
import sys
found = list(entries()) + ["sysv-%s:%d" % o for o in ipc_objects()]
pids = (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
sys.stdout.write(" ".join(found) + "\\n" + " ".join(pids) + "\\n")
"""
)


PACKAGES = ("agents", "graphs", "sandbox", "tools", "problems")  # what a worker imports from the checkout


def default_mounts() -> list[str]:
    """The host folders a bare image needs to run this interpreter and this checkout, read-only.

    Paths are kept as spelled (``/lib64`` is often a symlink: binaries look for their loader there).
    The checkout is mounted package by package, not whole: a checkout in a private (0700) folder, as
    ``mktemp -d`` makes, would hide everything below it from the container's user.
    """
    wanted = ["/usr", "/lib", "/lib64", "/bin", "/etc", sys.base_prefix, sys.prefix]
    wanted += [str(PROJECT_ROOT / p) for p in PACKAGES]
    out: list[str] = []
    for path in wanted:
        path = os.path.abspath(path)
        if os.path.exists(path) and not any(path == m or path.startswith(m + "/") for m in out):
            out = [m for m in out if not m.startswith(path + "/")] + [path]
    return out


class _Container:
    """One running sandbox container and the processes that belong to it when idle."""

    def __init__(
        self, client: Any, config: DockerSandboxConfig, gpu: str | None, jobs_dir: Path, profiling: bool = False
    ) -> None:
        from docker.types import DeviceRequest, Mount

        mounts = [Mount(p, p, type="bind", read_only=True) for p in (config.mounts or default_mounts())]
        mounts.append(Mount(JOBS_IN_CONTAINER, str(jobs_dir), type="bind", read_only=True))

        requests = [DeviceRequest(device_ids=[gpu], capabilities=[["gpu"]])] if gpu is not None else []
        self.python = config.python or sys.executable
        memory = config.memory_bytes()  # sized from the host unless set; no swap beyond it
        self.container = client.containers.run(
            config.image,
            [self.python, "-c", "import time; time.sleep(1 << 30)"],  # any image with Python has this
            detach=True,
            name=f"kforge-{'profile' if profiling else 'sandbox'}-{secrets.token_hex(4)}",
            labels={"kernelforge": "sandbox"},
            network_mode="none",
            read_only=True,
            mem_limit=memory,
            memswap_limit=memory,
            # An IPC namespace and /dev/shm of its own, whatever the engine's default-ipc-mode says.
            ipc_mode="private",
            pids_limit=config.pids,
            cap_drop=["ALL"],
            # ncu reads the GPU's performance counters, which the driver keeps for admins by default.
            cap_add=config.profile_caps if profiling else None,
            security_opt=["no-new-privileges"],
            user=config.profile_user if profiling else config.user,
            init=True,
            mounts=mounts,
            # No working_dir under /tmp: docker would create it 0755 as root on the tmpfs.
            tmpfs={"/tmp": f"rw,exec,nosuid,size={config.tmpfs_size},mode=1777"},
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            device_requests=requests,
            auto_remove=False,
        )
        # The container's own pids while idle (init, sleep): everything else after a job is left over.
        self.idle_pids = self._snapshot()[1]
        # One job at a time: the clean-up after a job kills every other process and empties every
        # writable place (/tmp, /dev/shm, /dev/mqueue, System V IPC).
        self.busy = threading.Lock()

    def _run_python(self, code: str, *args: str) -> str:
        exit_code, output = self.container.exec_run([self.python, "-c", code, *args])
        if exit_code != 0:
            raise EnvironmentProblem(f"the sandbox container cannot run {self.python}: {output.decode()[-300:]}")
        return output.decode()

    def alive(self) -> bool:
        with contextlib.suppress(Exception):  # a container that cannot be inspected is as good as gone
            self.container.reload()
            return self.container.status == "running"
        return False

    def clean_up(self) -> bool:
        """Kill every process a job left behind and empty every writable place (jobs run one at a time), so
        the next job finds the container as it started. False if that failed, or left anything (a fork bomb
        can leave no pid to run it with): the caller then replaces the container."""
        try:
            exit_code, _ = self.container.exec_run([self.python, "-c", _CLEAN_UP, *self.idle_pids])
        except Exception as exc:  # the engine refusing the exec means the same: recycle the container
            log.info("sandbox_cleanup_failed", error=str(exc))
            return False
        return exit_code == 0

    def _snapshot(self) -> tuple[list[str], list[str]]:
        """(what the writable places hold: paths and ``sysv-<kind>:<id>``, pids running) inside the container."""
        files, pids = self._run_python(_SNAPSHOT).split("\n")[:2]
        return files.split(), pids.split()

    def leftovers(self) -> tuple[list[str], list[str]]:
        """(what the writable places hold, processes other than the idle ones): what a job left behind."""
        files, pids = self._snapshot()
        return files, [p for p in pids if p not in self.idle_pids]

    def remove(self) -> None:
        with contextlib.suppress(Exception):  # already gone is fine: the goal is that it is gone
            self.container.remove(force=True)


class DockerSandbox:
    def __init__(self, config: DockerSandboxConfig | None = None) -> None:
        self.config = config or DockerSandboxConfig()
        self.client = self.connect()
        if not image_exists(self.client, self.config.image):
            raise EnvironmentProblem(f"no sandbox image {self.config.image}: run `kforge sandbox build`")
        self.jobs_dir = Path(tempfile.mkdtemp(prefix="kforge-docker-jobs-"))
        os.chmod(self.jobs_dir, 0o755)  # the container's user reads job files; it cannot write them
        self._containers: dict[str | None, _Container] = {}
        self._lock = threading.Lock()
        self._devices = HostDevices(self.config.gpus)
        atexit.register(self.close)  # containers must not outlive the run that started them

    @staticmethod
    def connect() -> Any:
        """A client of the local Docker engine, or EnvironmentProblem saying why there is none."""
        try:
            import docker
        except ImportError as exc:
            raise EnvironmentProblem("the docker backend needs the `docker` Python package") from exc
        try:
            client = docker.from_env()
            client.ping()
        except Exception as exc:  # any failure to reach the engine means the same thing to the user
            raise EnvironmentProblem(f"cannot reach the Docker engine: {exc}") from exc
        return client

    def leftovers(self) -> tuple[list[str], list[str]]:
        """What the last job left in the CPU container: (files and IPC objects, processes); both empty normally."""
        return self._container(None).leftovers()

    def close(self) -> None:
        with self._lock:
            for c in self._containers.values():
                c.remove()
            self._containers.clear()
        shutil.rmtree(self.jobs_dir, ignore_errors=True)

    def _container(self, gpu: str | None) -> _Container:
        with self._lock:
            c = self._containers.get(gpu)
            if c is None or not c.alive():
                if c is not None:
                    c.remove()
                c = self._start(gpu)
                self._containers[gpu] = c
            return c

    def _start(self, gpu: str | None, profiling: bool = False) -> _Container:
        try:
            return _Container(self.client, self.config, gpu, self.jobs_dir, profiling)
        except EnvironmentProblem:
            raise
        except Exception as exc:  # the engine's own error text is the useful part
            raise EnvironmentProblem(f"cannot start the sandbox container ({self.config.image}): {exc}") from exc

    def _recycle(self, gpu: str | None, container: _Container, why: str) -> None:
        """Remove ``container``; the next job on ``gpu`` starts a fresh one."""
        with self._lock:
            if self._containers.get(gpu) is container:
                del self._containers[gpu]
        log.info("sandbox_container_recycled", why=why)
        container.remove()

    def _env(self, scratch: str) -> dict[str, str]:
        # The container's device request decides which GPU it sees (as its device 0): the host's
        # CUDA_VISIBLE_DEVICES would name devices the container does not have.
        dropped = ("KFORGE_CACHE_DIR", "CUDA_VISIBLE_DEVICES")
        env = {k: v for k, v in os.environ.items() if k in self.config.env_allow and k not in dropped}
        env.update(
            HOME=scratch,
            TMPDIR=f"{scratch}/tmp",
            # A cache of the job's own: a cache shared between jobs could be planted by one candidate
            # with a kernel for the next.
            KFORGE_CACHE_DIR=f"{scratch}/cache",
            PYTHONPATH=str(PROJECT_ROOT),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
        )
        return env

    def run(self, job: AnyJob) -> JobResult:
        # Host-wide turns, as the local backend takes them: a timing job has its device alone.
        with self._devices.turn(job) as gpu:
            # A candidate's output is in its verdict: no API key of this process may leave in it.
            return redact_model(self._run_in_container(job, gpu.env_id if gpu else None))

    def _run_in_container(self, job: AnyJob, gpu: str | None) -> JobResult:
        bound = log.bind(job_id=job.job_id, kind=job.kind, backend="docker", gpu=gpu)
        job_file = self.jobs_dir / f"{job.job_id}.json"
        job_file.write_text(job.model_dump_json())
        os.chmod(job_file, 0o644)
        scratch = f"/tmp/kforge-{job.job_id}"
        if job.kind == "profile":
            # Its privileges are the profiler's, not the jobs': a container of its own, gone after it.
            container = self._start(gpu, profiling=True)
            try:
                return self._run(job, gpu, container, scratch, bound)
            finally:
                job_file.unlink(missing_ok=True)
                container.remove()
        while True:
            container = self._container(gpu)
            with container.busy:
                if not container.alive():
                    continue  # replaced while this job waited for it
                try:
                    return self._run(job, gpu, container, scratch, bound)
                finally:
                    job_file.unlink(missing_ok=True)
                    if container.alive() and not container.clean_up():
                        self._recycle(gpu, container, "cleaning up after a job failed")

    def _run(
        self,
        job: AnyJob,
        gpu: str | None,
        container: _Container,
        scratch: str,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> JobResult:
        api = self.client.api
        command = [
            container.python,
            "-m",
            "sandbox.worker",
            "--job",
            f"{JOBS_IN_CONTAINER}/{job.job_id}.json",
            "--result-fd",
            "1",
        ]
        exec_id = api.exec_create(
            container.container.id,
            command,
            stdin=True,
            stdout=True,
            stderr=True,
            environment=self._env(scratch),
            workdir="/tmp",
        )["Id"]
        key = secrets.token_bytes(KEY_BYTES)
        started = time.perf_counter()
        sock = api.exec_start(exec_id, socket=True)
        raw: socket.socket = getattr(sock, "_sock", sock)
        raw.sendall(key)
        stdout, stderr, timed_out = _read_streams(raw, started + job.timeout_s + GRACE_S, self.config.output_tail_bytes)
        with contextlib.suppress(OSError):
            raw.close()
        wall = time.perf_counter() - started
        if timed_out:
            self._recycle(gpu, container, "a job ran past its time limit")
            exit_code = None
        else:
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        # Inside a container a signal shows as 128 + its number, never as a negative code.
        ended = how_it_ended(-(exit_code - 128) if exit_code and exit_code > 128 else exit_code)
        tails = {"stdout_tail": "", "stderr_tail": stderr.decode(errors="replace")}
        result = job_verdict(
            job,
            stdout,
            key,
            timed_out=timed_out,
            ended=ended,
            exit_code=exit_code,
            wall_s=wall,
            tails=tails,
            bound=bound,
        )
        if any(s in f"{result.reason} {result.details}" for s in STICKY_CUDA):
            self._recycle(gpu, container, "a sticky CUDA error")
        return result


def _read_streams(raw: socket.socket, deadline: float, tail_bytes: int) -> tuple[bytes, bytes, bool]:
    """Read an exec's multiplexed stdout/stderr until EOF or ``deadline``: (stdout, stderr tail, timed out).

    Stdout (the verdict) is kept up to VERDICT_LIMIT; of stderr, only the last ``tail_bytes``.
    """
    buf = b""
    out = bytearray()
    err = bytearray()
    err_total = 0
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return bytes(out), bytes(err), True
        ready, _, _ = select.select([raw], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = raw.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 8:
            stream, size = struct.unpack(">BxxxL", buf[:8])
            if len(buf) < 8 + size:
                break
            payload, buf = buf[8 : 8 + size], buf[8 + size :]
            if stream == 1 and len(out) < VERDICT_LIMIT:
                out += payload[: VERDICT_LIMIT - len(out)]
            elif stream == 2:
                err_total += len(payload)
                err = (err + payload)[-tail_bytes:]
    if err_total > tail_bytes:
        err = bytearray(f"[... {err_total - tail_bytes} bytes cut ...]\n".encode()) + err
    return bytes(out), bytes(err), False


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_bare_image(client: Any, tag: str = "kforge-sandbox:host") -> str:
    """Make the bare sandbox image: an empty root filesystem (no registry needed).

    Everything a job runs comes from the host through read-only mounts (``default_mounts``).
    """
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w"):
        pass
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(buf.getvalue(), repository=repository, tag=version or "latest")
    return tag
