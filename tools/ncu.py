"""Nsight Compute: the command that profiles one contender's call, and its CSV read into typed records.

A profile is asked for, never part of a verdict: ncu replays every kernel many times (seconds per kernel)
and needs the GPU's performance counters, which a container only grants with extra privileges. The
worker runs ``command(...)`` around ``python -m sandbox.profile_target``, which opens the profiler range
for one call after warm-up, so compilation and autotuning kernels are not in it; ncu flushes the caches
before each kernel (its default) and leaves the clocks as they are, as the timing does.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import subprocess

from pydantic import BaseModel, Field

from tools.errors import EnvironmentProblem

# KernelProfile field -> ncu metric. Stable names since Nsight Compute 2020; every one is on Hopper.
METRICS: dict[str, str] = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
}
# Units ncu may print (``--print-units auto`` scales them), in the base unit each field holds.
UNIT_SCALE: dict[str, float] = {
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
}
NO_COUNTERS = "ERR_NVGPUCTRPERM"
NAME_WIDTH = 56  # kernel names in text; C++ template names run to hundreds of characters
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu")


class NcuError(EnvironmentProblem):
    """ncu is missing, may not read the counters, or printed something that is not its CSV."""


class KernelProfile(BaseModel):
    """One kernel launch as ncu measured it (times in ns, traffic in bytes, utilisations in % of peak)."""

    name: str
    grid: int | None = None
    block: int | None = None
    registers: int | None = Field(None, description="registers per thread")
    duration_ns: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    sm_pct: float | None = Field(None, description="SM throughput, % of the peak sustained over the kernel")
    memory_pct: float | None = Field(None, description="memory throughput (DRAM, L2, L1), % of peak: the busiest")
    occupancy_pct: float | None = Field(None, description="achieved warps per SM, % of the maximum")

    @property
    def dram_bytes(self) -> float:
        return (self.dram_read_bytes or 0.0) + (self.dram_write_bytes or 0.0)


class ContenderProfile(BaseModel):
    """Every kernel one call of a contender (eager, compile or the candidate) launched."""

    contender: str
    kernels: list[KernelProfile]

    @property
    def duration_ns(self) -> float:
        return sum(k.duration_ns or 0.0 for k in self.kernels)

    @property
    def dram_bytes(self) -> float:
        return sum(k.dram_bytes for k in self.kernels)

    @property
    def dram_bytes_per_s(self) -> float | None:
        return self.dram_bytes / self.duration_ns * 1e9 if self.duration_ns else None


class ProfileReport(BaseModel):
    ncu: str = Field(description="the ncu that measured it, as `ncu --version` names itself")
    metrics: list[str] = Field(description="the ncu metrics asked for")
    problem_bytes: int | None = Field(None, description="the problem's inputs + outputs + parameters, once each")
    contenders: dict[str, ContenderProfile]

    def traffic_ratio(self, contender: str) -> float | None:
        """DRAM bytes a contender moved over the problem's own bytes: 1.0 reads and writes each once."""
        if not self.problem_bytes or contender not in self.contenders:
            return None
        return self.contenders[contender].dram_bytes / self.problem_bytes

    def summary(self, contender: str) -> str:
        """One line for a planner: kernels, time, DRAM traffic, and where the longest kernel is busy."""
        c = self.contenders[contender]
        ratio = self.traffic_ratio(contender)
        traffic = f"{ratio:.2f}× the problem's bytes" if ratio else f"{c.dram_bytes / 1e6:.1f} MB"
        rate = f" at {c.dram_bytes_per_s / 1e12:.2f} TB/s" if c.dram_bytes_per_s else ""
        text = f"{len(c.kernels)} kernel(s), {c.duration_ns / 1e3:.1f} µs, DRAM {traffic}{rate}"
        longest = max(c.kernels, key=lambda k: k.duration_ns or 0.0, default=None)
        if longest is not None:
            busy = [
                f"{what} {value:.0f}%"
                for what, value in (
                    ("memory", longest.memory_pct),
                    ("SM", longest.sm_pct),
                    ("occupancy", longest.occupancy_pct),
                )
                if value is not None
            ]
            text += f"; longest kernel {longest.name.split('(')[0]}" + (f": {', '.join(busy)}" if busy else "")
        return text


def find_ncu(explicit: str | None = None) -> str:
    """The ncu to run: ``explicit`` if given, else the one on PATH, else a CUDA toolkit's or Nsight's."""
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise NcuError(f"ncu {explicit!r}: no such executable")
    found = shutil.which("ncu") or next(
        (path for pattern in NCU_PLACES for path in sorted(glob.glob(pattern), reverse=True)), None
    )
    if not found:
        raise NcuError("Nsight Compute (ncu) not found on PATH nor in /usr/local/cuda/bin: install it or pass its path")
    return found


def version(path: str) -> str:
    """ "Version 2025.3.1.0 (build ...)", as ``ncu --version`` names itself."""
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    named = [line.strip() for line in proc.stdout.splitlines() if line.strip().lower().startswith("version")]
    return named[0] if named else f"{path} (version not printed)"


def command(ncu: str, log_file: str, target: list[str]) -> list[str]:
    """ncu around ``target``: only the profiler range it opens, every process it starts, CSV to ``log_file``."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(METRICS.values()),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        log_file,
        *target,
    ]


def _number(text: str, unit: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value * UNIT_SCALE.get(unit.strip().lower(), 1.0)


def parse_csv(text: str) -> list[KernelProfile]:
    """The kernels of ncu's CSV, one per launch in launch order.

    ``--page raw`` prints a header row, a units row (no ID) and a row per launch with a column per
    metric; the details page (ncu's default) a row per metric of each launch, with its name, unit and
    value: both are read. ncu's own messages (``==PROF==``, ``==WARNING==``) may share the file.
    """
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(lines))
    start = next((i for i, row in enumerate(rows) if "Kernel Name" in row and "ID" in row), None)
    if start is None:
        if any(line.startswith("==") and "No kernels" in line for line in text.splitlines()):
            return []
        raise NcuError("ncu printed no CSV table (no 'Kernel Name' header): " + _last_line(text))
    header = rows[start]
    records = [dict(zip(header, row, strict=True)) for row in rows[start + 1 :] if len(row) == len(header)]
    launches: dict[str, tuple[str, dict[str, float | None]]] = {}  # ID -> (kernel name, metric -> value)
    if "Metric Name" in header:
        for r in records:
            values = launches.setdefault(r["ID"], (r["Kernel Name"], {}))[1]
            values[r["Metric Name"]] = _number(r["Metric Value"], r.get("Metric Unit", ""))
    else:
        units = {}
        for r in records:
            if not r["ID"].strip():
                units = r  # the units row
                continue
            launches[r["ID"]] = (
                r["Kernel Name"],
                {m: _number(r[m], units.get(m, "")) for m in METRICS.values() if m in r},
            )
    if not launches:
        return []
    seen = set().union(*(values for _, values in launches.values()))
    missing = [m for m in METRICS.values() if m not in seen]
    if missing:
        raise NcuError(f"ncu's CSV lacks the metric(s) {', '.join(missing)}: this ncu or GPU does not collect them")
    kernels = []
    for name, values in launches.values():
        fields = {field: values.get(metric) for field, metric in METRICS.items()}
        ints = {k: None if fields[k] is None else int(fields[k]) for k in ("registers", "grid", "block")}
        kernels.append(KernelProfile(name=name, **{**fields, **ints}))
    return kernels


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def failure_reason(log: str, returncode: int) -> str:
    """One line: why ncu did not profile (``log``: what it and the profiled process printed)."""
    if NO_COUNTERS in log:
        return (
            f"ncu may not read the GPU's performance counters here ({NO_COUNTERS}): profile as root, with "
            "CAP_SYS_ADMIN, or on a driver loaded with NVreg_RestrictProfilingToAdminUsers=0"
        )
    return f"ncu exited with {returncode}: {_last_line(log)}"


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def render(report: ProfileReport, problem: str, warmup: int | None = None) -> str:
    """The profile as text: a line per contender, then a line per kernel (``kforge profile``, trace, tools)."""
    after = f" after {warmup} warm-up calls" if warmup else ""
    lines = [
        f"{problem} · {report.ncu} · one call{after}; caches flushed before each kernel, clocks not locked",
        f"  {'contender':10} {'kernels':>7} {'µs':>10} {'DRAM MB read + written':>24} {'× problem':>9} {'TB/s':>6}",
    ]
    for name, c in report.contenders.items():
        read = sum(k.dram_read_bytes or 0.0 for k in c.kernels) / 1e6
        written = sum(k.dram_write_bytes or 0.0 for k in c.kernels) / 1e6
        rate = c.dram_bytes_per_s
        lines.append(
            f"  {name:10} {len(c.kernels):7d} {c.duration_ns / 1e3:10.1f} {f'{read:.1f} + {written:.1f}':>24} "
            f"{_fmt(report.traffic_ratio(name), '.2f', '×'):>9} {_fmt(rate and rate / 1e12, '.2f'):>6}"
        )
    lines.append("")
    lines.append(
        f"  {'kernel':{NAME_WIDTH}} {'grid × block':>14} {'regs':>4} {'µs':>9} {'SM %':>5} {'mem %':>5} {'occ %':>5}"
    )
    for name, c in report.contenders.items():
        lines.append(f"  {name}")
        for k in c.kernels:
            shown = k.name if len(k.name) <= NAME_WIDTH - 2 else k.name[: NAME_WIDTH - 3] + "…"
            shape = f"{_fmt(k.grid, 'd')} × {_fmt(k.block, 'd')}"
            lines.append(
                f"    {shown:{NAME_WIDTH - 2}} {shape:>14} "
                f"{_fmt(k.registers, 'd'):>4} {_fmt(k.duration_ns and k.duration_ns / 1e3, '.1f'):>9} "
                f"{_fmt(k.sm_pct, '.0f'):>5} {_fmt(k.memory_pct, '.0f'):>5} {_fmt(k.occupancy_pct, '.0f'):>5}"
            )
    return "\n".join(lines)
