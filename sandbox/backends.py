"""A backend from its config, and where its jobs run: the layer above the backends (``sandbox/local.py``,
``docker.py``, ``ray.py``), each of which imports only its own config class from ``sandbox.config``.

``make_sandbox`` imports a backend's module only when it is asked for, so a machine without the docker SDK or engine,
or without Ray, can still use the local backend.
"""

from __future__ import annotations

from sandbox.config import AnySandboxConfig, LocalSandboxConfig, Sandbox
from tools.errors import ConfigError


def job_machine(config: AnySandboxConfig, device: str) -> tuple[str, int]:
    """The device jobs run on ('auto' resolved) and the memory one job may use, where this sandbox runs them.

    The local and docker backends run jobs on this machine; the Ray backend asks its cluster, so a machine
    without a GPU can drive a cluster that has them. A bad or impossible choice is a one-line error.
    """
    if config.type == "ray":
        from sandbox.ray import cluster_machine

        return cluster_machine(config, device)
    from tools.device import device_memory_bytes, resolve_device

    resolved = resolve_device(device)
    return resolved, _within_container(config, resolved, device_memory_bytes(resolved))


def _within_container(config: AnySandboxConfig, device: str, available: int) -> int:
    """A CPU job in a docker container, or contained by the local backend, has that memory limit, not the whole
    host's RAM."""
    if device == "cpu" and (config.type == "docker" or (config.type == "local" and config.contain)):
        return min(available, config.memory_bytes())
    return available


def job_memory_bytes(config: AnySandboxConfig, device: str) -> int:
    """The memory one job on ``device`` (already resolved) may use, where this sandbox runs jobs."""
    if config.type == "ray":
        from sandbox.ray import cluster_machine

        return cluster_machine(config, device)[1]
    from tools.device import device_memory_bytes

    return _within_container(config, device, device_memory_bytes(device))


def make_sandbox(config: AnySandboxConfig | None = None) -> Sandbox:
    config = config or LocalSandboxConfig()
    if config.type == "local":
        from sandbox.local import LocalSandbox

        return LocalSandbox(config)
    if config.type == "docker":
        from sandbox.docker import DockerSandbox

        return DockerSandbox(config)
    if config.type == "ray":
        from sandbox.ray import RaySandbox  # raises EnvironmentProblem, one line, without Ray installed

        return RaySandbox(config)
    raise ConfigError(f"unknown sandbox type {config.type!r}")
