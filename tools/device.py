"""What this machine offers, read without creating a CUDA context in the orchestrator."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
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


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU this process may use. ``index`` is how a user names it (nvidia-smi's index, or the entry of
    $CUDA_VISIBLE_DEVICES); ``env_id`` is what a worker's CUDA_VISIBLE_DEVICES gets: the UUID where
    known, because CUDA's own device order need not be nvidia-smi's."""

    index: str
    uuid: str | None
    name: str

    @property
    def env_id(self) -> str:
        return self.uuid or self.index


def visible_gpus() -> list[VisibleGpu]:
    """The GPUs this process may use, in $CUDA_VISIBLE_DEVICES order when it is set."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    rows = _nvidia_smi("index,uuid,name")
    if rows is None:  # no nvidia-smi: ask torch, which knows no UUIDs
        if not cuda_available():
            return []
        n = torch.cuda.device_count()
        names = env.split(",")[:n] if env else [str(i) for i in range(n)]
        return [VisibleGpu(name.strip(), None, torch.cuda.get_device_name(i)) for i, name in enumerate(names)]
    return visible_from(rows, env)


def visible_from(rows: list[str], env: str | None) -> list[VisibleGpu]:
    """The GPUs named by $CUDA_VISIBLE_DEVICES (``env``), given nvidia-smi's ``index,uuid,name`` rows."""
    gpus = [VisibleGpu(*(field.strip() for field in row.split(",", 2))) for row in rows]
    if env is None:
        return gpus
    chosen = []
    for entry in (e.strip() for e in env.split(",")):
        if entry.startswith("MIG-"):  # a MIG instance: nvidia-smi's GPU query does not list it
            models = {g.name for g in gpus}
            chosen.append(VisibleGpu(entry, entry, f"MIG slice of {models.pop()}" if len(models) == 1 else "MIG slice"))
            continue
        found = [g for g in gpus if entry and (entry == g.index or (g.uuid or "").startswith(entry))]
        if len(found) != 1:
            break  # as CUDA does: enumeration stops at the first entry that names no one device
        chosen.append(found[0])
    return chosen


def cpu_name() -> str:
    """The CPU's model name (``platform.processor()`` is empty on most Linux systems)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# The instruction-set extensions a kernel writer picks code paths by (x86 flags, Arm features), in this order.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip


def _size_bytes(text: str) -> int:
    """sysfs cache sizes: ``32K``, ``1024K``, ``32768K``, ``2M``."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def cpu_caches() -> dict[str, int]:
    """Data and unified cache sizes seen by CPU 0, by level (``L1d``, ``L2``, ``L3``); empty where sysfs has none."""
    caches: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        kind = (index / "type").read_text().strip() if (index / "type").exists() else ""
        if kind not in ("Data", "Unified") or not (index / "size").exists():
            continue
        level = (index / "level").read_text().strip()
        caches[f"L{level}{'d' if kind == 'Data' else ''}"] = _size_bytes((index / "size").read_text())
    return caches


def cpu_isa() -> list[str]:
    """The extensions of ``ISA_FLAGS`` this CPU has, from /proc/cpuinfo."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return []
    for line in cpuinfo.read_text().splitlines():
        if line.startswith(("flags", "Features")):
            have = set(line.split(":", 1)[1].split())
            return [f for f in ISA_FLAGS if f in have]
    return []


def hardware_facts(device: torch.device) -> dict[str, str]:
    """What a kernel writer sizes a kernel by, as strings for a job's ``environment``. CUDA: SMs, threads and
    registers per SM, shared memory per block (opt-in) and per SM, L2 and device memory in bytes. CPU: cores this
    process may use, the ISA extensions, cache sizes by level and the last level's (``llc_bytes``)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        # Fields torch added over its releases: a build without one leaves that line out of the sheet.
        fields = {
            "sms": "multi_processor_count",
            "threads_per_sm": "max_threads_per_multi_processor",
            "regs_per_sm": "regs_per_multiprocessor",
            "smem_per_block_bytes": "shared_memory_per_block_optin",
            "smem_per_sm_bytes": "shared_memory_per_multiprocessor",
            "l2_bytes": "L2_cache_size",
            "memory_bytes": "total_memory",
        }
        return {key: str(getattr(props, name)) for key, name in fields.items() if hasattr(props, name)}
    caches = cpu_caches()
    facts = {"cores": str(len(os.sched_getaffinity(0))), "isa": " ".join(cpu_isa())}
    facts.update({f"{level.lower()}_bytes": str(size) for level, size in caches.items()})
    if caches:
        facts["llc_bytes"] = str(max(caches.values()))  # the last level is the largest
    return facts


def gpu_summary() -> list[str]:
    rows = _nvidia_smi("name,driver_version,memory.total")
    if rows:
        return [
            f"{r.split(',')[0].strip()} (driver {r.split(',')[1].strip()}, {r.split(',')[2].strip()} MiB)" for r in rows
        ]
    if cuda_available():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return []
