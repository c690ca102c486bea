"""Device ceilings (measured once per device, cached) and each problem's roofline floor.

The floor is the larger of bytes moved over copy bandwidth and FLOPs over the matmul rate the
tolerance policy allows (TF32 under ``relaxed`` for fp32 problems, plain fp32 under ``strict``). A
result's "% of roofline" is floor / measured time: 100% means no kernel can do much better.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable

import torch
from pydantic import BaseModel

from tools.device import cpu_name
from tools.paths import cache_dir
from tools.problem import ProblemInfo, TensorSpec
from tools.protocol import Ceilings, Device, Policy
from tools.timing import CudaTimer


class Floor(BaseModel):
    bytes_ms: float
    flops_ms: float
    floor_ms: float
    bound: str  # "memory" or "compute"
    rate_name: str


def _median_ms(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median time of ``fn`` after warm-up calls: on CUDA timed as candidates are (``tools.timing.CudaTimer``: L2
    flushed by a read, the stream held while the host enqueues the call), so a floor and the times set against it
    are one measure. Events right after a synchronisation put the 1 GiB copy at 4.02-4.15 TB/s on the H200, and
    the harness's eager relu at 102-106% of that floor; this way the copy runs at 4.22 and the relu at 100.5%
    (bench/RESULTS.md)."""
    warm, times = 5, []
    if device.type == "cuda":
        timer = CudaTimer(device)
        for _ in range(reps + warm):
            timer.flush()
            times.append(timer.time_call(fn, []).ms)
    else:
        for _ in range(reps + warm):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    times = sorted(times[warm:])
    return times[len(times) // 2]


def _matmul_rate(n: int, dtype: torch.dtype, device: torch.device, reps: int, tf32: bool) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        ms = _median_ms(lambda: torch.mm(a, b), device, reps)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return 2 * n**3 / (ms * 1e-3)


def measure_ceilings(device: Device) -> Ceilings:
    """Measure copy bandwidth and matmul rates on random data (never zeros: they run faster)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        n_bytes, mm_n, reps = 1 << 30, 8192, 10
    else:
        name = cpu_name()
        n_bytes, mm_n, reps = 256 << 20, 1024, 5
    src = torch.randn(n_bytes // 4, device=dev)
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src), dev, reps)
    ceilings = Ceilings(
        device=device,
        device_name=name,
        copy_bytes_per_s=2 * n_bytes / (copy_ms * 1e-3),
        fp32_flops=_matmul_rate(mm_n, torch.float32, dev, reps, tf32=False),
        tf32_flops=_matmul_rate(mm_n, torch.float32, dev, reps, tf32=True) if dev.type == "cuda" else None,
        bf16_flops=_matmul_rate(mm_n, torch.bfloat16, dev, reps, tf32=False) if dev.type == "cuda" else None,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        torch_version=torch.__version__,
    )
    return ceilings


# Part of the cache key: ceilings measured another way (before: CUDA events right after a synchronisation, no
# flush) are measured again rather than read back.
CEILINGS_METHOD = "held-read-flush"


def ceilings_cache_key(device: Device, device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{device}-{device_name}-{CEILINGS_METHOD}")


def cached_ceilings(device: Device, device_name: str) -> Ceilings | None:
    path = cache_dir("ceilings") / f"{ceilings_cache_key(device, device_name)}.json"
    return Ceilings.model_validate_json(path.read_text()) if path.exists() else None


def store_ceilings(ceilings: Ceilings, device_name: str) -> None:
    """Cache under the name the caller looks the device up by."""
    path = cache_dir("ceilings") / f"{ceilings_cache_key(ceilings.device, device_name)}.json"
    path.write_text(ceilings.model_dump_json(indent=2))


def floor(info: ProblemInfo, ceilings: Ceilings, policy: Policy) -> Floor:
    """The fastest any kernel could run this problem on this device."""
    dtypes = {s.dtype for s in info.inputs if isinstance(s, TensorSpec)}
    if dtypes & {"bfloat16", "float16"} and ceilings.bf16_flops:
        rate, rate_name = ceilings.bf16_flops, "bf16"
    elif policy == "relaxed" and ceilings.tf32_flops:
        rate, rate_name = ceilings.tf32_flops, "tf32"
    else:
        rate, rate_name = ceilings.fp32_flops, "fp32"
    bytes_ms = info.bytes_moved / ceilings.copy_bytes_per_s * 1e3
    flops_ms = info.flops / rate * 1e3
    bound = "compute" if flops_ms > bytes_ms else "memory"
    return Floor(
        bytes_ms=bytes_ms, flops_ms=flops_ms, floor_ms=max(bytes_ms, flops_ms), bound=bound, rate_name=rate_name
    )


def percent_of_roofline(floor_ms: float, measured_ms: float) -> float:
    return 100.0 * floor_ms / measured_ms if measured_ms > 0 else float("nan")
