"""What several ``kforge`` commands share: naming a problem, and the sandbox options with the config they ask for.

``graphs.cli`` (every command) and ``graphs.cli_profile`` (``kforge profile``) both import from here, and neither
from the other.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tools.errors import ConfigError, ProblemError

if TYPE_CHECKING:
    from sandbox.config import AnySandboxConfig

PROBLEMS_DIR = Path(__file__).resolve().parent.parent / "problems"
RAY_ADDRESS_HELP = "with --sandbox ray: the cluster's head, host:port (default: $RAY_ADDRESS, else a local Ray)"
GPUS_HELP = "GPUs CUDA jobs are spread over, indices or UUIDs, e.g. 0,1 (default: every visible one, of one model)"


def resolve_problem(arg: str) -> Path:
    """A path, or the name of a built-in problem (``softmax_small`` → problems/softmax_small.py)."""
    path = Path(arg)
    if path.exists():
        return path
    builtin = PROBLEMS_DIR / f"{arg.removesuffix('.py')}.py"
    if builtin.exists():
        return builtin
    known = ", ".join(sorted(p.stem for p in PROBLEMS_DIR.glob("*.py") if not p.stem.startswith("_")))
    raise ProblemError(f"{arg}: no such file and no built-in problem of that name (built-in: {known})")


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """--sandbox and the options of its backends, the same for every command that runs jobs."""
    parser.add_argument("--sandbox", default="local", choices=["local", "docker", "ray"])
    parser.add_argument("--ray-address", default=None, help=RAY_ADDRESS_HELP)
    parser.add_argument("--gpus", default=None, help=GPUS_HELP)


def sandbox_config(args: argparse.Namespace) -> AnySandboxConfig:
    """The backend configuration the options of ``add_sandbox_options`` ask for."""
    from sandbox.config import DockerSandboxConfig, LocalSandboxConfig, RaySandboxConfig

    name, ray_address, gpus = args.sandbox, args.ray_address, args.gpus
    if ray_address and name != "ray":
        raise ConfigError("--ray-address needs --sandbox ray")
    if name == "ray":
        if gpus:
            raise ConfigError("--gpus is for the local and docker backends: on Ray, the cluster places each job")
        return RaySandboxConfig(address=ray_address)
    pool = [g.strip() for g in gpus.split(",")] if gpus else None
    if pool is not None and not all(pool):
        raise ConfigError(f"--gpus {gpus!r}: give GPU indices or UUIDs separated by commas, e.g. 0,1")
    return DockerSandboxConfig(gpus=pool) if name == "docker" else LocalSandboxConfig(gpus=pool)
