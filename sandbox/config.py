"""Sandbox backends' configuration: one pydantic class per backend, told apart by ``type``.

The backends import their config classes from here; ``sandbox.backends`` builds a backend from its config.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, Field, field_validator

from tools.protocol import AnyJob, JobResult

# Variables a worker may inherit; everything else (API keys, tokens, cloud credentials) is dropped.
DEFAULT_ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "CC",
    "CXX",
    "OMP_NUM_THREADS",
    "KFORGE_CACHE_DIR",
    "XDG_CACHE_HOME",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUPY_CACHE_DIR",
    "TRITON_CACHE_DIR",
)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MIN_CONTAINER_MEMORY = 1 << 30  # below this a worker cannot import torch and run a job


def parse_size(text: str) -> int:
    """Bytes in a size as docker writes it: ``3g``, ``512m``, ``1.5g``, ``4096`` (binary units, ``b`` optional)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", text.lower())
    if not m:
        raise ValueError(f"bad size {text!r}: expected a number and a unit, e.g. 12g or 512m")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def host_memory_bytes() -> int:
    """This host's RAM (MemTotal): the docker backend's containers run on this machine's engine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class JobLimits(BaseModel):
    """The memory and process limits of a job: a docker backend's container, or a local backend's contained job
    (CPU jobs' memory: sandbox.contain)."""

    memory: str | None = Field(
        None,
        description="memory limit, in docker's units ('12g', '512m'): of a container, swap included (docker); of a "
        "CPU job's private writable memory (local, contained); None: memory_fraction of this host's RAM",
    )
    memory_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="with memory=None, the share of this host's RAM (MemTotal) one container or CPU job may use: "
        "the rest stays for the orchestrator, its compiles and the host. The limit is per container (one per GPU in "
        "each kforge process) or per job (a batch's --parallel runs several): lower it, or set memory, where that "
        "would overcommit the host",
    )
    pids: int = Field(
        512,
        ge=16,
        description="processes and threads at once, of a container (docker) or of a job that runs a candidate's code "
        "(local, contained): a fork bomb stops here",
    )

    @field_validator("memory")
    @classmethod
    def _docker_size(cls, value: str | None) -> str | None:
        if value is not None:
            parse_size(value)
        return value

    def memory_bytes(self) -> int:
        """The memory limit, in bytes: ``memory``, or ``memory_fraction`` of this host's RAM."""
        if self.memory is not None:
            return parse_size(self.memory)
        share = int(host_memory_bytes() * self.memory_fraction) >> 20 << 20  # whole MiB: the kernel keeps pages
        return max(MIN_CONTAINER_MEMORY, share)


class LocalSandboxConfig(JobLimits):
    """Each job in a fresh ``python -m sandbox.worker`` subprocess on this machine."""

    type: Literal["local"] = "local"
    python: str | None = Field(None, description="interpreter for the worker; None: this one")
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    keep_scratch: bool = Field(False, description="keep each job's scratch folder for debugging")
    prefork: bool = Field(
        True, description="fork workers from a server that has imported torch (saves seconds per job)"
    )
    gpus: list[str] | None = Field(
        None, description="GPUs (indices or UUIDs) CUDA jobs are spread over, one model only; None: every visible one"
    )
    device_turns: bool = Field(
        True, description="take host-wide turns on each device: a timing job holds its device alone (sandbox.devices)"
    )
    contain: bool = Field(
        True,
        description="run each CPU job in its own PID, network, IPC and mount namespaces (sandbox.contain) where the "
        "kernel allows, within the memory and pids limits; a job's result says what it got",
    )
    contain_cuda: bool = Field(
        False, description="contain CUDA jobs too (off until verified on a GPU machine: bench/RESULTS.md)"
    )
    disk: str = Field(
        "4g",
        description="what a contained job may write, in docker's units: a job that runs candidate code gets a scratch "
        "folder of this size (a tmpfs of its own, in memory), and no file any contained job writes, its output "
        "included, may grow past it",
    )
    output_tail_bytes: int = 4096

    @field_validator("disk")
    @classmethod
    def _disk_size(cls, value: str) -> str:
        parse_size(value)
        return value

    def disk_bytes(self) -> int:
        return parse_size(self.disk)


class DockerSandboxConfig(JobLimits):
    """Each job a fresh worker process inside one long-lived, locked-down container per GPU.

    The container: no network, read-only root, a tmpfs for scratch, memory and pid limits, every
    capability dropped, no-new-privileges, a non-root user and an init process. ``mounts`` are bound
    read-only: by default the host's system folders, this interpreter and the checkout, which is how a
    bare image (``docker import`` of an empty tar) runs the host's Python; an image with its own
    Python, torch and kernelforge needs none (set ``mounts=[]`` and ``python``).
    """

    type: Literal["docker"] = "docker"
    image: str = Field("kforge-sandbox:host", description="made by `kforge sandbox build` (a bare image)")
    python: str | None = Field(None, description="interpreter inside the container; None: this one's path")
    mounts: list[str] | None = Field(None, description="host paths bound read-only; None: the defaults")
    gpus: list[str] | None = Field(
        None, description="GPUs (indices or UUIDs) jobs are spread over, a container each; None: every visible one"
    )
    user: str = "65534:65534"
    tmpfs_size: str = Field("4g", description="size of the container's /tmp, where jobs get scratch")
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    output_tail_bytes: int = 4096
    profile_user: str = Field("0:0", description="user of the container a profile job (ncu) runs in, alone")
    profile_caps: list[str] = Field(
        ["SYS_ADMIN"],
        description="capabilities that container keeps: ncu reads the GPU's counters; [] where the driver "
        "lets every user (NVreg_RestrictProfilingToAdminUsers=0)",
    )


class RaySandboxConfig(BaseModel):
    """Each job a Ray task on a cluster; inside it, the local backend's fresh worker process.

    A CUDA job asks Ray for one GPU (so timing holds it alone), a CPU job for ``cpus_per_job`` cores.
    Every node needs the same checkout and environment as this machine: the task imports kernelforge.
    """

    type: Literal["ray"] = "ray"
    address: str | None = Field(
        None, description="the cluster's address (host:port of `ray start --head`); None: $RAY_ADDRESS, else local"
    )
    cpus_per_job: float = Field(1.0, gt=0, description="CPU cores a job asks Ray for (CUDA jobs too)")
    max_retries: int = Field(3, ge=0, description="re-runs of a job whose Ray worker or node died")
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    keep_scratch: bool = Field(False, description="keep each job's scratch folder (on the node that ran it)")
    output_tail_bytes: int = 4096


SandboxConfig = Annotated[LocalSandboxConfig | DockerSandboxConfig | RaySandboxConfig, Field(discriminator="type")]
AnySandboxConfig = LocalSandboxConfig | DockerSandboxConfig | RaySandboxConfig


class Sandbox(Protocol):
    def run(self, job: AnyJob) -> JobResult:
        """Run one job; a candidate's failure is a status in the result, never an exception."""
        ...
