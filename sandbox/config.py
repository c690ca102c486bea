"""Sandbox backends' configuration: one pydantic class per backend, told apart by ``type``.

``make_sandbox`` imports a backend's module only when it is asked for, so a machine without the
docker SDK (or, later, Ray) can still use the local backend.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

from sandbox.protocol import CeilingsJob, EvalJob, JobResult
from tools.errors import ConfigError

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


class LocalSandboxConfig(BaseModel):
    """Each job in a fresh ``python -m sandbox.worker`` subprocess on this machine."""

    type: Literal["local"] = "local"
    python: str | None = Field(None, description="interpreter for the worker; None: this one")
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    keep_scratch: bool = Field(False, description="keep each job's scratch folder for debugging")
    prefork: bool = Field(
        True, description="fork workers from a server that has imported torch (saves seconds per job)"
    )
    output_tail_bytes: int = 4096


# A discriminated union once a second backend exists (the docker backend is the next issue).
SandboxConfig = LocalSandboxConfig


class Sandbox(Protocol):
    def run(self, job: EvalJob | CeilingsJob) -> JobResult:
        """Run one job; a candidate's failure is a status in the result, never an exception."""
        ...


def make_sandbox(config: SandboxConfig | None = None) -> Sandbox:
    config = config or LocalSandboxConfig()
    if config.type == "local":
        from sandbox.local import LocalSandbox

        return LocalSandbox(config)
    raise ConfigError(f"unknown sandbox type {config.type!r}")
