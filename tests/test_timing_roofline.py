"""Timing statistics, fresh inputs per trial and roofline floors; ceilings measured for real on the CPU."""

from __future__ import annotations

import time

import pytest
import torch

from sandbox.evaluation import get_ceilings, noise_flags
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS
from tools.problem import load_problem
from tools.protocol import Ceilings, TimingConfig, TimingReport
from tools.roofline import cached_ceilings, floor, percent_of_roofline
from tools.timing import (
    EXTEND,
    STABLE_TRIALS,
    CpuTimer,
    CudaTimer,
    min_trials_for,
    paired_ratios,
    refresher,
    summarize,
    time_interleaved,
)

H200_LIKE = Ceilings(
    device="cuda",
    device_name="test",
    copy_bytes_per_s=4.28e12,
    fp32_flops=51e12,
    tf32_flops=364e12,
    bf16_flops=684e12,
    measured_at="2026-12-02",
    torch_version="x",
)


def test_summarize() -> None:
    s = summarize([float(x) for x in range(1, 101)])
    assert s.trials == 100
    assert s.median_ms == pytest.approx(50.5)
    assert s.min_ms == 1.0
    assert s.p10_ms < s.median_ms < s.p90_ms
    assert s.spread == pytest.approx(s.iqr_ms / 50.5)


def test_every_trial_gets_fresh_values_in_the_same_buffers() -> None:
    buffers = [torch.zeros(8), 3]
    refresh = refresher(lambda k: [torch.full((8,), float(k)), 3], buffers)
    pointer = buffers[0].data_ptr()
    seen = []

    def record(x: torch.Tensor, n: int) -> torch.Tensor:
        seen.append((x.data_ptr(), float(x[0]), n))
        return x * n

    cfg = TimingConfig(min_trials=4, min_seconds=0.0, warmup_trials=1)
    timed = time_interleaved({"f": record}, buffers, refresh, CpuTimer(), cfg, keep="f")
    stats, kept, trials = timed.stats, timed.kept, timed.trials
    assert trials == 4 and stats["f"].trials == 4
    assert [v for _, v, _ in seen[1:]] == [0.0, 1.0, 2.0, 3.0]  # after the warm-up call: one value per trial
    assert {p for p, _, _ in seen} == {pointer}
    assert torch.equal(kept, torch.full((8,), 9.0))


def test_interleaved_timing_tells_slow_from_fast() -> None:
    def fast(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.003)
        return x + 1

    inputs = [torch.randn(1000)]
    refresh = refresher(lambda k: [torch.randn(1000)], inputs)
    cfg = TimingConfig(min_trials=20, min_seconds=0.0, warmup_trials=1)
    contenders = {"fast": fast, "slow": slow}
    timed = time_interleaved(contenders, inputs, refresh, CpuTimer(), cfg, keep="fast")
    stats, paired, kept, trials, seconds = timed.stats, timed.paired, timed.kept, timed.trials, timed.seconds
    # Told apart at the minimum: no more trials than asked
    assert stats["fast"].trials == stats["slow"].trials == trials == 20
    low, high = timed.intervals["slow/fast"]
    assert 1.0 < low <= paired["slow/fast"] <= high
    assert stats["slow"].median_ms >= 3.0 > stats["fast"].median_ms
    assert paired["slow/fast"] > 1.0 > paired["fast/slow"]
    assert torch.equal(kept, inputs[0] + 1)
    assert seconds > 0.06


def test_a_contender_not_yet_told_apart_is_timed_on_but_no_further_than_the_bound() -> None:
    """The kept contender takes 1 ms on even trials and 3 ms on odd ones against a steady 2 ms: its per-trial ratios
    sit near 2 and near 0.67, so the median's interval spans 1 however many trials run. The loop times on past the
    minimum, to EXTEND times its trials or seconds."""
    calls = {"n": 0}

    def steady(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.002)
        return x + 1

    def alternating(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        time.sleep(0.001 if calls["n"] % 2 else 0.003)
        return x + 1

    inputs = [torch.randn(10)]
    cfg = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=1)
    timed = time_interleaved(
        {"steady": steady, "candidate": alternating}, inputs, lambda k: None, CpuTimer(), cfg, keep="candidate"
    )
    assert 10 < timed.trials <= EXTEND * 10, timed.trials
    low, high = timed.intervals["steady/candidate"]
    assert low < 1.0 < high


def test_long_calls_get_fewer_trials_but_never_fewer_than_a_stable_median_needs() -> None:
    """100 trials of 60 ms calls would take 6 s: the count comes down to what fits the config's long_trials_s (2 s),
    at least STABLE_TRIALS; short calls keep the asked-for count, and an asked-for count below STABLE_TRIALS stands."""
    cfg = TimingConfig(min_trials=100, min_seconds=0.0, warmup_trials=2)
    assert min_trials_for(cfg, 0.001) == 100
    assert min_trials_for(cfg, 0.05) == 40
    assert min_trials_for(cfg, 0.5) == STABLE_TRIALS
    assert min_trials_for(TimingConfig(min_trials=5), 1.0) == 5

    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.01)
        return x + 1

    # The warm-up's calls tell the loop how long one takes: 10 ms calls against 0.1 s for the count.
    quick = TimingConfig(min_trials=100, min_seconds=0.0, warmup_trials=2, long_trials_s=0.1)
    stats, *_ = time_interleaved({"slow": slow}, [torch.randn(4)], lambda k: None, CpuTimer(), quick)
    assert stats["slow"].trials == STABLE_TRIALS


def test_host_time_is_recorded_beside_each_contenders_time() -> None:
    def sleepy(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.002)
        return x + 1

    inputs = [torch.randn(10)]
    cfg = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)
    stats, *_ = time_interleaved({"s": sleepy}, inputs, lambda k: None, CpuTimer(), cfg)
    assert stats["s"].host_median_ms is not None and stats["s"].host_median_ms >= 2.0


class _CountingCpuTimer(CpuTimer):
    """The real CPU timer, counting the flushes the timing loop asks of it."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


@pytest.mark.parametrize("flush", [True, False])
def test_the_cache_is_flushed_before_each_call_unless_the_config_says_not(flush: bool) -> None:
    timer = _CountingCpuTimer()
    cfg = TimingConfig(min_trials=3, min_seconds=0.0, warmup_trials=1, flush_cache=flush)
    time_interleaved({"a": torch.neg, "b": torch.abs}, [torch.randn(4)], lambda k: None, timer, cfg)
    assert timer.flushes == (6 if flush else 0)


def _tiny_gpu_op(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@pytest.mark.gpu
def test_a_held_stream_hides_the_hosts_work_before_the_launch_and_counting_mode_shows_it() -> None:
    x = torch.randn(1024, device="cuda")

    def slow_host(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.0003)  # 0.3 ms of Python before the launch
        return _tiny_gpu_op(x)

    held, counted = CudaTimer(x.device), CudaTimer(x.device, hold_ms=0)
    for timer in (held, counted):
        timer.time_call(slow_host, [x])  # warm-up
    h = [held.time_call(slow_host, [x]) for _ in range(20)]
    c = [counted.time_call(slow_host, [x]) for _ in range(20)]
    assert sorted(t.ms for t in h)[10] < 0.1  # the GPU's work: a few microseconds
    assert sorted(t.ms for t in c)[10] >= 0.3  # the host's 0.3 ms shows as idle GPU time
    assert min(t.host_ms for t in h + c) >= 0.3
    assert all(torch.equal(t.out, x + 1) for t in h + c)


@pytest.mark.gpu
def test_host_work_that_waits_for_the_gpu_is_counted_even_with_a_held_stream() -> None:
    x = torch.randn(1024, device="cuda")

    def syncs_then_works(x: torch.Tensor) -> torch.Tensor:
        torch.cuda.synchronize()  # waits out the hold: the start event is behind it
        time.sleep(0.0005)
        return _tiny_gpu_op(x)

    def longer_than_the_hold(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.003)  # 3 ms of host work against a 0.5 ms hold: the rest shows
        return _tiny_gpu_op(x)

    timer = CudaTimer(x.device, hold_ms=0.5)
    timer.time_call(syncs_then_works, [x])
    assert sorted(timer.time_call(syncs_then_works, [x]).ms for _ in range(10))[5] >= 0.5
    assert sorted(timer.time_call(longer_than_the_hold, [x]).ms for _ in range(10))[5] >= 1.5


def test_roofline_floor_matches_the_design_table() -> None:
    # DESIGN.md: matmul 4096² TF32 floor 0.382 ms (with the same day's rate), softmax 0.502 ms,
    # LayerNorm 0.133 ms (one read + one write + parameters).
    mm = floor(load_problem(PROBLEMS / "matmul_4096.py").info, H200_LIKE, "relaxed")
    assert mm.bound == "compute" and mm.rate_name == "tf32"
    assert mm.floor_ms == pytest.approx(2 * 4096**3 / 364e12 * 1e3)
    assert floor(load_problem(PROBLEMS / "matmul_4096.py").info, H200_LIKE, "strict").rate_name == "fp32"
    sm = floor(load_problem(PROBLEMS / "softmax_4096x65536.py").info, H200_LIKE, "relaxed")
    assert sm.bound == "memory" and sm.floor_ms == pytest.approx(0.502, abs=0.001)
    ln = floor(load_problem(PROBLEMS / "layernorm_16x64x256x256.py").info, H200_LIKE, "relaxed")
    assert ln.floor_ms == pytest.approx(0.133, abs=0.001)
    assert percent_of_roofline(0.133, 0.266) == pytest.approx(50.0)


def test_cpu_ceilings_are_measured_once_and_cached() -> None:
    sandbox = LocalSandbox()
    first = get_ceilings(sandbox, "cpu", "ci-cpu")
    assert first.copy_bytes_per_s > 1e8 and first.fp32_flops > 1e8
    assert cached_ceilings("cpu", "ci-cpu") == first
    assert get_ceilings(sandbox, "cpu", "ci-cpu") == first  # served from the cache


def test_paired_ratios_hold_through_a_busy_machine_s_slow_spells() -> None:
    # The candidate is 1.25x faster in every trial; in 9 of 20 trials the machine slowed everything 30x (another
    # process on the cores). The medians fall on either side of the spells: eager's in a slow trial, the
    # candidate's in a quick one. Per-trial pairs keep the 1.25.
    slow = [t in (1, 3, 5, 7, 9, 11, 13, 15, 17) for t in range(20)]
    eager = [30.0 if s else 1.0 for s in slow]
    candidate = [24.0 if s else 0.8 for s in slow]
    eager[0] = eager[2] = 30.0  # two more slow trials for eager alone: its median lands in a spell
    paired = paired_ratios({"eager": eager, "candidate": candidate})
    stats = {"eager": summarize(eager), "candidate": summarize(candidate)}
    assert paired["eager/candidate"] == pytest.approx(1.25)
    assert stats["eager"].median_ms / stats["candidate"].median_ms > 10  # what the medians alone would say
    report = TimingReport(method="perf_counter", input_sets=20, flush_bytes=0, stats=stats, paired=paired, seconds=1)
    assert report.speedup("eager") == pytest.approx(1.25)
    (flag,) = noise_flags(report)
    assert flag.startswith("noisy timing (eager's spread") and "vs eager 1.250× from per-trial pairs but" in flag
    quiet = {"eager": [1.0, 1.01] * 10, "candidate": [0.8, 0.81] * 10}
    steady = TimingReport(
        method="perf_counter",
        input_sets=20,
        flush_bytes=0,
        stats={k: summarize(v) for k, v in quiet.items()},
        paired=paired_ratios(quiet),
        seconds=1,
    )
    assert noise_flags(steady) == [] and steady.speedup("eager") == pytest.approx(1.25, rel=0.01)
    # A trial whose time read 0 (shorter than the timer's resolution) gives no ratio; the others still do.
    assert paired_ratios({"a": [1.0, 2.0, 0.0], "b": [2.0, 0.0, 1.0]}) == {"a/b": 0.5, "b/a": 2.0}
    # A report saved before paired ratios were recorded falls back to the ratio of medians.
    assert steady.model_copy(update={"paired": {}}).speedup("eager") == pytest.approx(1.0 / 0.8, rel=0.02)
