"""The hardware sheet every LLM prompt gets: the device the jobs run on, as the baseline's job saw it.

The facts come from the baseline job's ``environment`` (``tools.device.hardware_facts``: SMs, shared memory, L2 on
a GPU; cores, ISA extensions, caches on a CPU) and the measured ceilings beside it (copy bandwidth, matmul rates),
so a model sizes tiles and judges a time against the machine it is timed on, not one it guesses.
"""

from __future__ import annotations

from typing import Any

CPU_CACHES = {"l1d_bytes": "L1d", "l2_bytes": "L2", "l3_bytes": "L3"}  # tools.device.hardware_facts's keys


def size(n: int | float) -> str:
    """``50 MiB``, ``227 KiB``, ``79.1 GiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.1f} {unit}"
    return f"{n:.0f} B"


def rate(per_s: float, unit: str) -> str:
    """``3.01 TB/s``, ``51.2 TFLOP/s``, ``180 GFLOP/s``: three significant figures, decimal prefixes."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if per_s >= scale:
            value = per_s / scale
            return f"{value:.3g} {prefix}{unit}"
    return f"{per_s:.3g} {unit}"


def _int(env: dict[str, Any], key: str) -> int | None:
    value = env.get(key)
    return int(value) if value not in (None, "") else None


def _measured(ceilings: dict[str, Any] | None) -> str | None:
    if not ceilings:
        return None
    parts = [f"copy bandwidth {rate(ceilings['copy_bytes_per_s'], 'B/s')}"]
    rates = [f"fp32 {rate(ceilings['fp32_flops'], 'FLOP/s')}"]
    if ceilings.get("tf32_flops"):
        rates.append(f"TF32 {rate(ceilings['tf32_flops'], 'FLOP/s')}")
    if ceilings.get("bf16_flops"):
        rates.append(f"bf16 {rate(ceilings['bf16_flops'], 'FLOP/s')}")
    parts.append("matmul " + ", ".join(rates))
    return "- Measured on it (what the roofline floor uses): " + "; ".join(parts) + "."


def _gpu_lines(env: dict[str, Any]) -> list[str]:
    versions = [v for v in (env.get("arch"), f"CUDA {env['cuda']}" if env.get("cuda") else None) if v]
    lines = [f"Target device: cuda, an {env['gpu']}" + (f" ({', '.join(versions)})." if versions else ".")]
    if sms := _int(env, "sms"):
        per_sm = [
            f"{n} threads" if (n := _int(env, "threads_per_sm")) else "",
            f"{n} registers" if (n := _int(env, "regs_per_sm")) else "",
            f"{size(n)} shared memory" if (n := _int(env, "smem_per_sm_bytes")) else "",
        ]
        text = f"- {sms} SMs; per SM " + ", ".join(p for p in per_sm if p)
        if n := _int(env, "smem_per_block_bytes"):
            text += f"; up to {size(n)} of dynamic shared memory per block (past 48 KiB only by opting in: in CuPy "
            text += "`kernel.max_dynamic_shared_size_bytes = bytes` before the launch)"
        lines.append(text + ".")
    memory = [
        f"{size(n)} L2" if (n := _int(env, "l2_bytes")) else "",
        f"{size(n)} device memory" if (n := _int(env, "memory_bytes")) else "",
    ]
    if any(memory):
        lines.append("- " + "; ".join(m for m in memory if m) + ".")
    return lines


def _cpu_lines(env: dict[str, Any]) -> list[str]:
    cores = _int(env, "cores")
    head = f"Target device: cpu, an {env['cpu']}"
    if cores:
        head += f", {cores} cores for the job"
        if env.get("threads"):
            head += f" (torch uses {env['threads']} threads)"
    lines = [head + "."]
    if env.get("isa"):
        lines.append(f"- ISA extensions: {env['isa']}.")
    caches = [f"{name} {size(n)}" for key, name in CPU_CACHES.items() if (n := _int(env, key))]
    if caches:
        lines.append("- Caches: " + ", ".join(caches) + ".")
    return lines


def sheet(device: str, baseline: dict[str, Any] | None) -> str:
    """The ``Target device`` lines of a prompt: the device's name and what a kernel is sized by, then the measured
    ceilings; just the device's kind until the baseline's job has reported its environment."""
    env = (baseline or {}).get("device") or {}
    if env.get("gpu"):
        lines = _gpu_lines(env)
    elif env.get("cpu"):
        lines = _cpu_lines(env)
    else:
        return f"Target device: {device}"
    measured = _measured((baseline or {}).get("ceilings"))
    return "\n".join([*lines, *([measured] if measured else [])])


def cache_bytes(baseline: dict[str, Any] | None) -> int | None:
    """The largest cache the device's data can stay in: a GPU's L2, a CPU's last level; None where unknown."""
    env = (baseline or {}).get("device") or {}
    return _int(env, "l2_bytes" if env.get("gpu") else "llc_bytes")
