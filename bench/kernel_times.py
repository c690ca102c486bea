"""Which kernels one call runs, and the device time of each, from torch's profiler.

A contender's measured time says how long a call takes, not where it goes. For a library op with a custom tail
(a convolution cast to fp16, then our kernel) the question is which part costs: the casts, the library's kernel
(cuDNN picks one by heuristics unless told to benchmark), or the tail. On a GPU the profiler's CUDA activity lists
every kernel the call launched, ours from CuPy included, with its device time; on the CPU the aten ops stand in
for kernels, with their own CPU time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class KernelTime:
    """One kernel (aten op on the CPU) over the profiled calls.

    name: the kernel's name as the profiler reports it (CUDA: the mangled or demangled symbol; CPU: ``aten::op``).
    us_per_call: its device time (CPU: self CPU time) summed over the calls, divided by the calls.
    launches_per_call: how many times a call ran it.
    """

    name: str
    us_per_call: float
    launches_per_call: float


def kernel_times(fn: Callable[..., Any], inputs: list[Any], device: torch.device, calls: int = 5) -> list[KernelTime]:
    """Profile ``calls`` calls of ``fn(*inputs)`` (after one warm-up call) and list its kernels, costliest first."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    cuda = device.type == "cuda"
    fn(*inputs)  # a first call's one-time work (autotuning, lazy module loads) is not a call's cost
    if cuda:
        torch.cuda.synchronize(device)
    # The CPU activity on a GPU too: without it some torch builds record no kernel events at all.
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize(device)
    wanted = DeviceType.CUDA if cuda else DeviceType.CPU
    out = []
    for event in prof.key_averages():
        if event.device_type != wanted:
            continue
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if cuda:
            us = max(us, event.device_time_total)  # a kernel has no children: either total is its own time
        out.append(KernelTime(event.key, us / calls, event.count / calls))
    if not out:  # an empty list would read as "no time anywhere": CUPTI failing to start looks like that
        raise RuntimeError(f"the profiler recorded no {wanted.name} events for {calls} calls")
    return sorted(out, key=lambda k: -k.us_per_call)


def kernel_lines(times: list[KernelTime], top: int, width: int = 110) -> list[str]:
    """Markdown list lines for the ``top`` costliest kernels (names cut to ``width``), then the rest as one line."""
    total = sum(k.us_per_call for k in times)
    lines = []
    for k in times[:top]:
        name = k.name if len(k.name) <= width else k.name[: width - 1] + "…"
        share = 100 * k.us_per_call / total if total else 0.0
        lines.append(f"- {k.us_per_call:.1f} µs ({share:.0f}%) ×{k.launches_per_call:g}: `{name}`")
    rest = times[top:]
    if rest:
        lines.append(f"- {sum(k.us_per_call for k in rest):.1f} µs in {len(rest)} other kernels")
    lines.append(f"- total {total:.1f} µs a call")
    return lines
