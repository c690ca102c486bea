"""The Ray backend: each job a Ray task on a cluster, running the local backend's worker inside it.

The task is transport only. On whichever node Ray places it, it runs the job as the local backend
does: a fresh ``python -m sandbox.worker`` interpreter in its own session, with a private scratch
folder, an allow-listed environment and the verdict signed on a pipe, so a verdict means the same on
every backend. A CUDA job asks Ray for one GPU, so two timing jobs never share one; a CPU job asks
for CPU cores. Each task gets a fresh Ray worker process (``max_calls=1``), so nothing one job did
to its process reaches the next.

When a worker or its whole node dies, Ray runs the task again (``max_retries``: system failures
only; an exception in the task is a bug and is raised, never retried). The caller holds one object
reference per job and reads it once, so each job's result arrives exactly once however many attempts
it took; the worker of an attempt that died is killed with it and can report to no one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import structlog
from pydantic import TypeAdapter

from sandbox.config import LocalSandboxConfig, RaySandboxConfig
from sandbox.local import LocalSandbox
from sandbox.prefork import ForkedProcess
from tools.errors import ConfigError, EnvironmentProblem, SandboxError
from tools.keys import redact_model
from tools.protocol import AnyJob, Job, JobResult

try:
    import ray
    from ray.exceptions import (
        GetTimeoutError,
        NodeDiedError,
        OutOfMemoryError,
        RayError,
        RayTaskError,
        WorkerCrashedError,
    )
except ImportError as exc:
    raise EnvironmentProblem(f"the ray sandbox needs Ray ({exc}): pip install 'kernelforge[ray]'") from exc

log = structlog.get_logger(__name__)
JOB = TypeAdapter(Job)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PROBE_TIMEOUT_S = 5.0
# What a dead attempt looks like once Ray has given up retrying: the job could not run, a status.
WORKER_DIED = (WorkerCrashedError, NodeDiedError, OutOfMemoryError)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook: the job's worker gets SIGKILL when the Ray worker that started it dies.

    A node killed mid-job takes its Ray workers with it, but the job's worker runs in a session of
    its own and would outlive them: a hanging candidate forever, and a retried job twice at once.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the hook runs between fork and exec
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the hook ran: no signal will come
            os._exit(1)

    return hook


def _probe(address: str) -> None:
    """Fail in seconds where nothing listens at ``host:port``: ``ray.init`` would retry for good."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(f"no Ray cluster answers at {address}: {exc}") from exc


def connect(config: RaySandboxConfig) -> None:
    """Join the cluster as its driver (once per process); a one-line error where none answers."""
    if ray.is_initialized():
        return
    address = config.address
    if address and "://" not in address and ":" in address:
        _probe(address)
    try:
        # Job output is in each result's tails; the workers' own logs stay on their nodes.
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except ConnectionError as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "this machine"
        raise EnvironmentProblem(f"cannot connect to the Ray cluster at {where}: {exc}") from exc
    log.info("ray_connected", address=address, resources=ray.cluster_resources())


@ray.remote(max_calls=1)
def _gpu_facts() -> dict[str, Any]:
    """What the GPU Ray gave this task is: asked of nvidia-smi (or torch), so no CUDA context is made."""
    from tools.device import device_memory_bytes, visible_gpus

    gpus = visible_gpus()
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": [g.name for g in gpus],
        "memory_bytes": device_memory_bytes("cuda") if gpus else None,
    }


_MACHINES: dict[tuple[str, str], tuple[str, int]] = {}


def cluster_machine(config: RaySandboxConfig, device: str, probe_timeout_s: float = 120.0) -> tuple[str, int]:
    """The device a job gets on the cluster ('auto': cuda where a node has a GPU) and the memory it may use.

    For CUDA one GPU of the cluster is asked, by a task that takes it as a job would, for its memory; a
    node that offers Ray a GPU its processes cannot see is an error here, not in every job. Answers are kept
    for the process (a run and its batch ask more than once). A cluster of mixed GPU models is not told apart.
    """
    if device not in ("cuda", "cpu", "auto"):
        raise ConfigError(f"unknown device {device!r}: use cuda, cpu or auto")
    key = (config.model_dump_json(), device)
    if key in _MACHINES:
        return _MACHINES[key]
    connect(config)
    where = config.address or os.environ.get("RAY_ADDRESS") or "this machine"
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    gpu_nodes = [n for n in nodes if n.get("GPU", 0.0) >= 1 and n.get("CPU", 0.0) >= config.cpus_per_job]
    resolved = ("cuda" if gpu_nodes else "cpu") if device == "auto" else device
    if resolved == "cpu":
        cpu_nodes = [n for n in nodes if n.get("CPU", 0.0) >= config.cpus_per_job]
        if not cpu_nodes:
            raise EnvironmentProblem(
                f"no node of the Ray cluster at {where} has {config.cpus_per_job:g} CPU(s) for a job"
            )
        # Ray's "memory" resource: what a node lets its tasks use; a job may land on the smallest of them.
        machine = ("cpu", int(min(n.get("memory", 0.0) for n in cpu_nodes)))
    else:
        if not gpu_nodes:
            raise EnvironmentProblem(f"--device cuda: no node of the Ray cluster at {where} has a GPU for a job")
        task = _gpu_facts.options(num_gpus=1, num_cpus=config.cpus_per_job, max_retries=config.max_retries)
        try:
            facts = ray.get(task.remote(), timeout=probe_timeout_s)
        except GetTimeoutError as exc:
            raise EnvironmentProblem(
                f"no GPU of the Ray cluster at {where} was free within {probe_timeout_s:g} s to report its memory"
            ) from exc
        if facts["memory_bytes"] is None:
            raise EnvironmentProblem(
                f"node {facts['node'][:12]} of the Ray cluster at {where} offers a GPU, but a task given it sees "
                f"none (CUDA_VISIBLE_DEVICES={facts['visible']!r}): check the node's driver and `ray start --num-gpus`"
            )
        log.info("ray_gpu_probed", node=facts["node"], gpus=facts["gpus"], memory_bytes=facts["memory_bytes"])
        machine = ("cuda", int(facts["memory_bytes"]))
    _MACHINES[key] = machine
    return machine


class _TaskSandbox(LocalSandbox):
    """The local backend as a Ray task runs it: a new interpreter per job, bound to the task's life."""

    def _launch(
        self, job: AnyJob, scratch: Path, fds: list[int], job_path: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes] | ForkedProcess:
        key_fd, out_fd, err_fd, verdict_fd = fds
        return subprocess.Popen(
            [self.python, "-m", "sandbox.worker", "--job", str(job_path), "--result-fd", str(verdict_fd)],
            cwd=scratch,
            env=env,
            stdin=key_fd,
            stdout=out_fd,
            stderr=err_fd,
            pass_fds=(verdict_fd,),
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )


@ray.remote(max_calls=1)
def _job_task(job_json: str, local_json: str) -> str:
    """Run one job on this node, as the local backend would; the result as JSON, naming the node."""
    job = JOB.validate_json(job_json)
    result = _TaskSandbox(LocalSandboxConfig.model_validate_json(local_json)).run(job)
    node = ray.get_runtime_context().get_node_id()
    return result.model_copy(update={"environment": {**result.environment, "ray_node": node}}).model_dump_json()


class RaySandbox:
    """Jobs as Ray tasks: ``run`` one and wait, or ``run_many`` and take each result as it finishes."""

    def __init__(self, config: RaySandboxConfig | None = None) -> None:
        self.config = config or RaySandboxConfig()
        self._local = LocalSandboxConfig(
            prefork=False,  # a fork server would outlive the task's worker, which max_calls=1 ends
            device_turns=False,  # Ray places the jobs: a CUDA task gets a GPU of its own, pinned by Ray
            env_allow=self.config.env_allow,
            keep_scratch=self.config.keep_scratch,
            output_tail_bytes=self.config.output_tail_bytes,
        ).model_dump_json()
        self._connected_here = False
        if not ray.is_initialized():
            self._connect()

    def _connect(self) -> None:
        connect(self.config)
        self._connected_here = True

    def close(self) -> None:
        """Disconnect from the cluster, if this sandbox connected; jobs still running are cancelled."""
        if self._connected_here and ray.is_initialized():
            ray.shutdown()
        self._connected_here = False

    def run(self, job: AnyJob) -> JobResult:
        (result,) = self.run_many([job])
        return result

    def run_many(self, jobs: Iterable[AnyJob]) -> Iterator[JobResult]:
        """Submit every job at once; yield each one's result as it finishes, exactly once.

        Jobs not yet finished when the caller stops reading are cancelled (their workers killed).
        """
        jobs = list(jobs)
        ids = [job.job_id for job in jobs]
        if len(set(ids)) != len(ids):
            raise ConfigError("run_many: two jobs share a job_id; results are told apart by it")
        self._check_resources(jobs)
        pending: dict[Any, AnyJob] = {self._submit(job): job for job in jobs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield self._result(pending.pop(ref), ref)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def _submit(self, job: AnyJob) -> Any:
        return _job_task.options(
            name=f"kforge-{job.kind}-{job.job_id}",
            num_cpus=self.config.cpus_per_job,
            num_gpus=1 if job.device == "cuda" else 0,
            max_retries=self.config.max_retries,
            retry_exceptions=False,
        ).remote(job.model_dump_json(), self._local)

    def _check_resources(self, jobs: list[AnyJob]) -> None:
        """Fail now, not wait forever, when no node of the cluster could ever run a job."""
        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        if cpus < self.config.cpus_per_job:
            raise EnvironmentProblem(
                f"no node of the Ray cluster has {self.config.cpus_per_job:g} CPU(s) for a job (largest: {cpus:g})"
            )
        if any(job.device == "cuda" for job in jobs) and not any(
            n.get("GPU", 0.0) >= 1 and n.get("CPU", 0.0) >= self.config.cpus_per_job for n in nodes
        ):
            raise EnvironmentProblem(
                f"no node of the Ray cluster has a GPU and {self.config.cpus_per_job:g} CPU(s) for a CUDA job"
            )

    def _result(self, job: AnyJob, ref: Any) -> JobResult:
        bound = log.bind(job_id=job.job_id, kind=job.kind)
        try:
            payload = ray.get(ref)
        except WORKER_DIED as exc:
            attempts = self.config.max_retries + 1
            bound.warning("ray_job_lost", attempts=attempts, error=type(exc).__name__)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            reason = f"the Ray worker running the job died, {attempts} time(s): {first}"
            return JobResult(job_id=job.job_id, status="crashed", reason=reason, details=str(exc))
        except RayTaskError as exc:
            raise SandboxError(f"the Ray task for job {job.job_id} failed: {exc.cause!r}") from exc
        except RayError as exc:
            raise SandboxError(f"the Ray cluster lost job {job.job_id}: {type(exc).__name__}: {exc}") from exc
        result = JobResult.model_validate_json(payload)
        if result.job_id != job.job_id:
            raise SandboxError(f"job {job.job_id} came back as job {result.job_id}")
        bound.info("ray_job_done", status=result.status, node=result.environment.get("ray_node"))
        return redact_model(result)  # a candidate's output is in it: no API key of this process may leave in it
