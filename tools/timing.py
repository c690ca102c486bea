"""Time contenders side by side: interleaved, cache flushed, fresh input values every trial, medians and spread.

Timers hold references to the clock functions taken when they are built: the worker builds its
timer before it imports any candidate code, so a candidate that patches ``Event.elapsed_time``,
``torch.cuda.synchronize`` or ``time.perf_counter`` does not change what is measured.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
import torch

from tools import speed
from tools.device import cpu_caches
from tools.protocol import TimingConfig, TimingStats

_perf_counter = time.perf_counter


class Timed(NamedTuple):
    """One timed call: its measured time, the host's wall time inside the call, and what it returned."""

    ms: float
    host_ms: float
    out: Any


class Timer(Protocol):
    method: str
    flush_bytes: int

    def flush(self) -> None: ...

    def release_between_trials(self) -> None:
        """Free what ``flush`` holds where making it again costs nothing (while a trial's inputs are made)."""

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> Timed: ...

    def synchronize(self) -> None: ...


class CudaTimer:
    """CUDA events around each call on the stream that was current when the timer was built.

    With ``hold_ms`` > 0 (the harness's default) the stream is held by a one-thread GPU spin of about that
    long before the start event, so the host enqueues the whole call while the GPU waits and the events
    time the call's GPU work alone, as a call inside a busy model would run. Host work that waits for the
    GPU (a synchronisation, a copy to the host) comes after the start event and still counts. With
    ``hold_ms`` = 0 the timer synchronises and records at once: the host's work up to the launch shows up
    as idle GPU time, the latency of one isolated call; after a wait of milliseconds that host work runs
    several times slower than when warm (bench/RESULTS.md, "What the harness's interleaving costs"), so
    that measure depends on what ran before the call, not only on the call.
    """

    method = "cuda_events"

    def __init__(self, device: torch.device, hold_ms: float = 1.0, flush: Literal["read", "write"] = "read") -> None:
        props = torch.cuda.get_device_properties(device)
        self.flush_bytes = max(2 * props.L2_cache_size, 64 << 20)
        self._device = device
        self._zeros = torch.zeros
        self._flush_buf: torch.Tensor | None = None
        self._flush_sink = torch.empty((), dtype=torch.float32, device=device)
        self._flush_mode = flush
        self._sum = torch.sum  # bound now, like the clocks: a candidate that patches torch.sum keeps the flush
        self._stream = torch.cuda.current_stream(device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._record = torch._C._CudaEventBase.record
        self._elapsed = torch._C._CudaEventBase.elapsed_time
        self._sync = torch._C._cuda_synchronize
        self._spin = torch._C._cuda_sleep
        self._clock = _perf_counter
        self.hold_ms = hold_ms
        self._hold_cycles = self._cycles_for(hold_ms) if hold_ms > 0 else 0
        self.release()

    def _cycles_for(self, ms: float) -> int:
        """The spin's length in GPU cycles for ``ms``, measured with the GPU warm (its clock at speed).

        The spin kernel runs once before it is measured: its first launch loads its module (CUDA loads
        modules lazily), and that time, counted as spin, would make every hold far too short.
        """
        probe = 1 << 20
        self._spin(1000)
        for _ in range(5):
            self.flush()
        elapsed = []
        for _ in range(3):
            self._record(self._start, self._stream)
            self._spin(probe)
            self._record(self._end, self._stream)
            self._sync()
            elapsed.append(self._elapsed(self._start, self._end))
        return max(1, int(probe * ms / max(min(elapsed), 1e-3)))

    def flush(self) -> None:
        """Evict the L2: read a buffer twice its size (the default), or write one (``flush="write"``).

        A write leaves the L2 full of dirty lines, and the timed call, whose reads evict them, pays for
        their write-back to memory; a read leaves clean lines, evicted for free (bench/RESULTS.md, "What
        the cache flush costs the call after it").
        """
        if self._flush_buf is None:
            self._flush_buf = self._zeros(self.flush_bytes // 4, dtype=torch.float32, device=self._device)
        if self._flush_mode == "write":
            self._flush_buf.zero_()
        else:
            self._sum(self._flush_buf, dim=0, out=self._flush_sink)

    def release(self) -> None:
        """Free the flush buffer until the next flush: only timing needs it, and the checks' memory is the plan's."""
        self._flush_buf = None

    def release_between_trials(self) -> None:
        """The caching allocator hands the block back at the next flush, so the buffer and a trial's new inputs
        are never held together."""
        self.release()

    def synchronize(self) -> None:
        self._sync()

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> Timed:
        self._sync()  # the call's GPU work starts with nothing else in flight
        if self._hold_cycles:
            self._spin(self._hold_cycles)
        self._record(self._start, self._stream)
        t0 = self._clock()
        out = fn(*args)
        host = self._clock() - t0
        self._record(self._end, self._stream)
        self._sync()
        return Timed(self._elapsed(self._start, self._end), host * 1e3, out)


class CpuTimer:
    """``perf_counter`` around each call, with the same flush-and-refresh discipline."""

    method = "perf_counter"

    def __init__(self) -> None:
        # Twice the LLC would be the rule, but server L3s reach hundreds of MiB (480 MiB seen on a
        # CI host) and filling that before every call costs more than the calls; 64 MiB evicts L1/L2
        # and most of a typical L3 slice.
        self.flush_bytes = min(max(2 * max(cpu_caches().values(), default=32 << 20), 8 << 20), 64 << 20)
        self._empty = torch.empty
        self._flush_buf: torch.Tensor | None = None  # made by the first flush: only timing needs it
        self._clock = _perf_counter

    def flush(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = self._empty(self.flush_bytes // 4, dtype=torch.float32)
        self._flush_buf.fill_(1.0)

    def synchronize(self) -> None:
        """CPU calls are synchronous."""

    def release_between_trials(self) -> None:
        """Kept: a new buffer's pages would be faulted in anew every trial."""

    def time_call(self, fn: Callable[..., Any], args: list[Any]) -> Timed:
        start = self._clock()
        out = fn(*args)
        ms = (self._clock() - start) * 1e3
        return Timed(ms, ms, out)


def make_timer(device: torch.device, hide_launch: bool = True) -> Timer:
    if device.type == "cuda":
        return CudaTimer(device, hold_ms=1.0 if hide_launch else 0.0)
    return CpuTimer()


def summarize(samples_ms: list[float], host_ms: list[float] | None = None) -> TimingStats:
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
        host_median_ms=float(np.median(host_ms)) if host_ms else None,
    )


def paired_ratios(samples: dict[str, list[float]]) -> dict[str, float]:
    """For each ordered pair of contenders, ``"a/b"``: the median over trials of a's time over b's in that trial.

    A trial runs every contender back to back, so a slow spell of the machine (another process on the cores, a
    clock change) slows both sides of one trial's ratio; the ratio of two medians can take its numerator from a
    slow spell and its denominator from a quick one.
    """
    out = {}
    for a, x in samples.items():
        for b, y in samples.items():
            ratios = speed.per_trial_ratios(x, y) if a != b else np.zeros(0)
            if len(ratios):
                out[f"{a}/{b}"] = float(np.median(ratios))
    return out


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


EXTEND = 4  # an undecided contender is timed on to at most this many times the trials and seconds of the minimums
STABLE_TRIALS = 20  # the fewest trials whose median is steady for calls of 10-100 ms (bench/RESULTS.md)
WARMUP_S = 0.2  # a contender's warm-up stops after two calls once its calls took this long


class Timing(NamedTuple):
    """What ``time_interleaved`` measured."""

    stats: dict[str, TimingStats]
    paired: dict[str, float]  # paired_ratios
    intervals: dict[str, tuple[float, float]]  # tools.speed.paired_intervals of the kept contender
    kept: Any  # the output of the ``keep`` contender's last call (None without one)
    trials: int
    seconds: float


def _warm_up(fn: Callable[..., Any], inputs: list[Any], timer: Timer, cfg: TimingConfig) -> float:
    """Warm ``fn`` up (compilation, autotuning, caches); the seconds its last call took."""
    spent, last = 0.0, 0.0
    for done in range(1, cfg.warmup_trials + 1):
        start = _perf_counter()
        fn(*inputs)
        timer.synchronize()
        last = _perf_counter() - start
        spent += last
        if done >= 2 and spent >= WARMUP_S:
            break
    return last


def min_trials_for(cfg: TimingConfig, trial_s: float) -> int:
    """The trial count to reach: ``cfg.min_trials``, or fewer (never below ``STABLE_TRIALS``, nor above what was
    asked) where that many trials of ``trial_s`` seconds would take longer than ``cfg.long_trials_s``."""
    if cfg.min_trials * trial_s <= cfg.long_trials_s:
        return cfg.min_trials
    return min(cfg.min_trials, max(STABLE_TRIALS, math.ceil(cfg.long_trials_s / max(trial_s, 1e-9))))


def time_interleaved(
    contenders: dict[str, Callable[..., Any]],
    inputs: list[Any],
    refresh: Callable[[int], None],
    timer: Timer,
    cfg: TimingConfig,
    seed: int = 0,
    keep: str | None = None,
) -> Timing:
    """Time every contender on the same inputs, fresh values each trial, in a shuffled order each trial.

    Before every trial ``refresh(trial)`` gives ``inputs`` new values; before every call the cache is
    flushed. Each output is freed as soon as its call is timed, as a caller would, but ``keep``'s, which is held
    until that contender's next call: its last one comes back (so the caller can check that a timed call returned a
    real result). Trials run until ``cfg``'s minimums are met, the trial count adapted to the calls' length
    (``min_trials_for``); then, while ``keep`` cannot yet be called faster or slower than another contender
    (``tools.speed``), on to at most ``EXTEND`` times the trials and seconds the minimums took.
    """
    rng = random.Random(seed)
    with torch.no_grad():
        trial_s = sum(_warm_up(fn, inputs, timer, cfg) for fn in contenders.values())
        min_trials = min_trials_for(cfg, trial_s)
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        host: dict[str, list[float]] = {name: [] for name in contenders}
        kept: Any = None
        order = list(contenders)
        start = _perf_counter()
        trial = 0
        reached: tuple[int, float] | None = None  # trials and seconds when the minimums were met
        while True:
            timer.release_between_trials()
            refresh(trial)
            rng.shuffle(order)
            for name in order:
                if name == keep:
                    kept = None  # the previous output is freed before the call, as a caller would
                if cfg.flush_cache:
                    timer.flush()
                timed = timer.time_call(contenders[name], inputs)
                samples[name].append(timed.ms)
                host[name].append(timed.host_ms)
                if name == keep:
                    kept = timed.out
                del timed
            trial += 1
            elapsed = _perf_counter() - start
            if trial >= cfg.max_trials or elapsed >= cfg.max_seconds:
                break
            if trial >= min_trials and elapsed >= cfg.min_seconds:
                reached = reached or (trial, elapsed)
                if keep is None or trial >= EXTEND * reached[0] or elapsed >= EXTEND * reached[1]:
                    break
                if (trial - reached[0]) % reached[0] == 0 and not speed.undecided(samples, keep, seed):
                    break
    stats = {name: summarize(s, host[name]) for name, s in samples.items()}
    intervals = speed.paired_intervals(samples, keep, seed) if keep is not None else {}
    return Timing(stats, paired_ratios(samples), intervals, kept, trial, _perf_counter() - start)
