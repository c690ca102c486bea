"""The local backend: one job, one fresh worker process, its own session, scratch folder and env.

A CUDA job runs on one GPU of the pool (every visible GPU by default), its worker pinned to it through
CUDA_VISIBLE_DEVICES; a timing job holds its device alone (``sandbox.devices``).

The worker starts in a new process group so a timeout kills everything it spawned; its environment
is an allow-list (API keys never reach candidate code; ``tools.keys`` takes them out of this process's
too); its stdout and stderr go to files in a private scratch folder and are only ever shown, never
parsed; its verdict arrives signed on a pipe, and leaves ``run`` with every held API key redacted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import structlog

from sandbox import contain
from sandbox.channel import KEY_BYTES
from sandbox.config import LocalSandboxConfig
from sandbox.devices import HostDevices
from sandbox.prefork import ForkedProcess, ForkServerClient, ForkServerDied
from sandbox.verdict import how_it_ended, job_verdict
from tools.device import VisibleGpu
from tools.keys import redact_model
from tools.protocol import AnyJob, JobResult

log = structlog.get_logger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parent.parent
GRACE_S = 5.0  # beyond the job's own timeout: interpreter start and imports


def _tail(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        data = f.read()
    prefix = f"[... {size - limit} bytes cut ...]\n" if size > limit else ""
    return prefix + data.decode(errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group may already be empty: nothing to kill
        os.killpg(pgid, signal.SIGKILL)


class LocalSandbox:
    def __init__(self, config: LocalSandboxConfig | None = None) -> None:
        self.config = config or LocalSandboxConfig()
        self._forkserver: ForkServerClient | None = None
        self._forkserver_lock = threading.Lock()
        # Without turns the worker sees whatever GPUs this process does (a Ray task: the one Ray gave it).
        self._devices = HostDevices(self.config.gpus) if self.config.device_turns else None

    @property
    def python(self) -> str:
        return self.config.python or sys.executable

    def close(self) -> None:
        """Stop the fork server, if one was started."""
        with self._forkserver_lock:
            if self._forkserver is not None:
                self._forkserver.close()
                self._forkserver = None

    def _fork_server(self) -> ForkServerClient:
        with self._forkserver_lock:
            if self._forkserver is None or not self._forkserver.alive:
                home = Path(tempfile.mkdtemp(prefix="kforge-forkserver-"))
                self._forkserver = ForkServerClient(self.python, self._env(home))
            return self._forkserver

    def _launch(
        self, job: AnyJob, scratch: Path, fds: list[int], job_path: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes] | ForkedProcess:
        """Start the worker on (key pipe, stdout, stderr, verdict pipe): forked, or a new interpreter."""
        key_fd, out_fd, err_fd, verdict_fd = fds
        args = ["--job", str(job_path), "--result-fd", str(verdict_fd)]
        if self.config.prefork:
            request = {"job": str(job_path), "cwd": str(scratch), "env": env}
            return self._fork_server().spawn(job.job_id, request, fds)
        return subprocess.Popen(
            [self.python, "-m", "sandbox.worker", *args],
            cwd=scratch,
            env=env,
            stdin=key_fd,
            stdout=out_fd,
            stderr=err_fd,
            pass_fds=(verdict_fd,),
            start_new_session=True,
        )

    def _env(self, scratch: Path, gpu: VisibleGpu | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in self.config.env_allow}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu.env_id
        # The worker imports kernelforge from this checkout, plus whatever the parent could import.
        pythonpath = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env.update(
            HOME=str(scratch),
            TMPDIR=str(scratch / "tmp"),
            PYTHONPATH=os.pathsep.join(pythonpath),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
        )
        if "KFORGE_CACHE_DIR" not in env:
            # HOME moves to the scratch folder, so pin the shared compile cache where it was.
            from tools.paths import cache_dir

            env["KFORGE_CACHE_DIR"] = str(cache_dir())
        return env

    def run(self, job: AnyJob) -> JobResult:
        # A candidate's output is in its verdict: no API key of this process may leave in it.
        return redact_model(self._run_job(job))

    def _run_job(self, job: AnyJob) -> JobResult:
        bound = log.bind(job_id=job.job_id, kind=job.kind)
        if self.config.prefork:
            # Start the fork server (seconds: it imports torch) before taking a turn, not while holding a GPU.
            self._fork_server().wait_ready()
        turn = self._devices.turn(job) if self._devices else contextlib.nullcontext()
        with turn as gpu:
            result = self._run_in_scratch(job, gpu, bound.bind(gpu_index=gpu.index) if gpu else bound)
        if gpu is None:
            return result
        # "gpu" is the worker's own entry (the GPU's name); this one says which of the pool's GPUs it was.
        return result.model_copy(update={"environment": {**result.environment, "gpu_index": gpu.index}})

    def _run_in_scratch(
        self, job: AnyJob, gpu: VisibleGpu | None, bound: structlog.typing.FilteringBoundLogger
    ) -> JobResult:
        scratch = Path(tempfile.mkdtemp(prefix=f"kforge-{job.job_id}-"))
        os.chmod(scratch, 0o700)
        (scratch / "tmp").mkdir()
        try:
            return self._run(job, scratch, gpu, bound)
        finally:
            if not self.config.keep_scratch:
                # A candidate may leave files it made read-only; what cannot be removed stays in $TMPDIR.
                shutil.rmtree(scratch, ignore_errors=True)

    def _run(
        self,
        job: AnyJob,
        scratch: Path,
        gpu: VisibleGpu | None,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> JobResult:
        job_path = scratch / "job.json"
        job_path.write_text(job.model_dump_json())
        key = secrets.token_bytes(KEY_BYTES)
        key_r, key_w = os.pipe()
        os.write(key_w, key)  # 32 bytes always fit in the pipe's buffer
        os.close(key_w)
        read_fd, write_fd = os.pipe()
        received: list[bytes] = []
        stdout_path, stderr_path = scratch / "stdout.txt", scratch / "stderr.txt"

        def drain() -> None:
            with os.fdopen(read_fd, "rb") as pipe:
                received.append(pipe.read())

        started = time.perf_counter()
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            try:
                fds = [key_r, out.fileno(), err.fileno(), write_fd]
                env = self._env(scratch, gpu)
                if self.config.contain and (job.device == "cpu" or self.config.contain_cuda):
                    runs_candidate = getattr(job, "candidate_source", None) is not None
                    env[contain.REQUEST] = "candidate" if runs_candidate else "1"
                    memory = self.config.memory_bytes() if job.device == "cpu" else 0  # CUDA maps far more than it uses
                    env[contain.LIMITS] = f"{self.config.pids},{memory},{self.config.disk_bytes()}"
                proc = self._launch(job, scratch, fds, job_path, env)
            finally:
                os.close(key_r)
                os.close(write_fd)
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        timed_out = server_died = False
        try:
            proc.wait(timeout=job.timeout_s + GRACE_S)
        except subprocess.TimeoutExpired:
            timed_out = True
        except ForkServerDied:
            server_died = True
        # Kill the whole group in every case: a candidate may leave children behind.
        _kill_group(proc.pid)
        if timed_out:
            proc.wait()
        reader.join(timeout=10)
        wall = time.perf_counter() - started
        tails = {
            "stdout_tail": _tail(stdout_path, self.config.output_tail_bytes),
            "stderr_tail": _tail(stderr_path, self.config.output_tail_bytes),
        }
        ended = "lost with the fork server" if server_died else how_it_ended(proc.returncode)
        return job_verdict(
            job,
            received[0] if received else b"",
            key,
            timed_out=timed_out,
            ended=ended,
            exit_code=proc.returncode,
            wall_s=wall,
            tails=tails,
            bound=bound,
        )
