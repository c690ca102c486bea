"""Time contenders side by side: interleaved, cache flushed, fresh input values every trial, medians and spread.

Timers hold references to the clock functions taken when they are built: the worker builds its
timer before it imports any candidate code, so a candidate that patches ``Event.elapsed_time``,
``torch.cuda.synchronize`` or ``time.perf_counter`` does not change what is measured.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from sandbox.protocol import TimingConfig, TimingStats

_perf_counter = time.perf_counter


class Timer(Protocol):
    method: str
    flush_bytes: int

    def flush(self) -> None: ...

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> tuple[float, Any]: ...

    def synchronize(self) -> None: ...


class CudaTimer:
    """CUDA events around each call on the stream that was current when the timer was built."""

    method = "cuda_events"

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        self.flush_bytes = max(2 * props.L2_cache_size, 64 << 20)
        self._flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.float32, device=device)
        self._stream = torch.cuda.current_stream(device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._record = torch._C._CudaEventBase.record
        self._elapsed = torch._C._CudaEventBase.elapsed_time
        self._sync = torch._C._cuda_synchronize

    def flush(self) -> None:
        self._flush_buf.zero_()

    def synchronize(self) -> None:
        self._sync()

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> tuple[float, Any]:
        # Synchronising first means the host's launch overhead shows up as idle time between the two
        # events: for launch-bound ops that is the latency a user actually sees.
        self._sync()
        self._record(self._start, self._stream)
        out = fn(*args)
        self._record(self._end, self._stream)
        self._sync()
        return self._elapsed(self._start, self._end), out


def _last_level_cache_bytes() -> int:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = (index / "size").read_text().strip() if (index / "size").exists() else ""
        if text.endswith("K"):
            sizes.append(int(text[:-1]) << 10)
        elif text.endswith("M"):
            sizes.append(int(text[:-1]) << 20)
    return max(sizes, default=32 << 20)


class CpuTimer:
    """``perf_counter`` around each call, with the same flush-and-refresh discipline."""

    method = "perf_counter"

    def __init__(self) -> None:
        # Twice the LLC would be the rule, but server L3s reach hundreds of MiB (480 MiB seen on a
        # CI host) and filling that before every call costs more than the calls; 64 MiB evicts L1/L2
        # and most of a typical L3 slice.
        self.flush_bytes = min(max(2 * _last_level_cache_bytes(), 8 << 20), 64 << 20)
        self._flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.float32)
        self._clock = _perf_counter

    def flush(self) -> None:
        self._flush_buf.fill_(1.0)

    def synchronize(self) -> None:
        """CPU calls are synchronous."""

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> tuple[float, Any]:
        start = self._clock()
        out = fn(*args)
        return (self._clock() - start) * 1e3, out


def make_timer(device: torch.device) -> Timer:
    return CudaTimer(device) if device.type == "cuda" else CpuTimer()


def summarize(samples_ms: list[float]) -> TimingStats:
    a = np.asarray(samples_ms, dtype=np.float64)
    p10, p25, p50, p75, p90 = np.percentile(a, [10, 25, 50, 75, 90])
    return TimingStats(
        trials=len(a),
        median_ms=float(p50),
        mean_ms=float(a.mean()),
        min_ms=float(a.min()),
        p10_ms=float(p10),
        p90_ms=float(p90),
        iqr_ms=float(p75 - p25),
        std_ms=float(a.std()),
    )


def refresher(make: Callable[[int], list[Any]], buffers: list[Any]) -> Callable[[int], None]:
    """Refill ``buffers`` in place with the values of ``make(k)`` (a fresh seeded input set) for trial k.

    Same buffers, new values: a result cached under a data pointer or an id is then a wrong answer,
    and one cached under the contents never hits.
    """

    def refresh(k: int) -> None:
        with torch.no_grad():
            for buf, new in zip(buffers, make(k), strict=True):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)

    return refresh


def time_interleaved(
    contenders: dict[str, Callable[..., Any]],
    inputs: list[Any],
    refresh: Callable[[int], None],
    timer: Timer,
    cfg: TimingConfig,
    seed: int = 0,
) -> tuple[dict[str, TimingStats], dict[str, Any], int, float]:
    """Time every contender on the same inputs, fresh values each trial, in a shuffled order each trial.

    Before every trial ``refresh(trial)`` gives ``inputs`` new values; before every call the cache is
    flushed. Returns the stats per contender, each contender's output from the last trial (so the
    caller can check that timed calls returned real results), the number of trials and the wall time.
    """
    rng = random.Random(seed)
    with torch.no_grad():
        for fn in contenders.values():
            for _ in range(cfg.warmup_trials):
                fn(*inputs)
        timer.synchronize()
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        last: dict[str, Any] = {}
        order = list(contenders)
        start = _perf_counter()
        trial = 0
        while True:
            refresh(trial)
            rng.shuffle(order)
            for name in order:
                last.pop(name, None)  # the previous output is freed before the call, as a caller would
                timer.flush()
                ms, out = timer.time_call(contenders[name], inputs)
                samples[name].append(ms)
                last[name] = out
            trial += 1
            elapsed = _perf_counter() - start
            if trial >= cfg.max_trials or elapsed >= cfg.max_seconds:
                break
            if trial >= cfg.min_trials and elapsed >= cfg.min_seconds:
                break
    return {name: summarize(s) for name, s in samples.items()}, last, trial, _perf_counter() - start
