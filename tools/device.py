"""What this machine offers, read without creating a CUDA context in the orchestrator."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import torch

from tools.errors import ConfigError, EnvironmentProblem


def cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve_device(device: str) -> str:
    """'auto' picks cuda when a GPU is visible; 'cuda' without one is an environment problem."""
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise ConfigError(f"unknown device {device!r}: use cuda, cpu or auto")
    if device == "cuda" and not cuda_available():
        raise EnvironmentProblem("--device cuda, but no CUDA GPU is visible (try --device cpu)")
    return device


def _nvidia_smi(query: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    proc = subprocess.run(
        [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip().splitlines() if proc.returncode == 0 else None


def device_memory_bytes(device: str) -> int:
    """Memory a job on ``device`` can use: the first visible GPU's total, or the host's RAM."""
    if device == "cuda":
        rows = _nvidia_smi("memory.total")
        if rows:
            return int(float(rows[0].split(",")[0])) << 20
        return torch.cuda.get_device_properties(0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_name() -> str:
    """The CPU's model name (``platform.processor()`` is empty on most Linux systems)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gpu_summary() -> list[str]:
    rows = _nvidia_smi("name,driver_version,memory.total")
    if rows:
        return [
            f"{r.split(',')[0].strip()} (driver {r.split(',')[1].strip()}, {r.split(',')[2].strip()} MiB)" for r in rows
        ]
    if cuda_available():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return []
