"""Timing statistics, input rotation and roofline floors; ceilings measured for real on the CPU."""

from __future__ import annotations

import time

import pytest
import torch

from sandbox.local import LocalSandbox
from sandbox.protocol import Ceilings, TimingConfig
from tests.conftest import PROBLEMS
from tools.evaluation import get_ceilings
from tools.problem import load_problem
from tools.roofline import cached_ceilings, floor, percent_of_roofline
from tools.timing import CpuTimer, input_set_count, summarize, time_interleaved

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


def test_input_rotation_spans_the_cache() -> None:
    cfg = TimingConfig()
    assert input_set_count(1 << 30, cfg) == 2  # huge inputs: two sets already evict the cache
    assert input_set_count(60 << 20, cfg) == 3
    assert input_set_count(1024, cfg) == cfg.max_input_sets


def test_interleaved_timing_tells_slow_from_fast() -> None:
    def fast(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.003)
        return x + 1

    sets = [[torch.randn(1000)] for _ in range(3)]
    cfg = TimingConfig(min_trials=20, min_seconds=0.0, warmup_trials=1)
    stats, last, seconds = time_interleaved({"fast": fast, "slow": slow}, sets, CpuTimer(), cfg)
    assert stats["fast"].trials == stats["slow"].trials == 20
    assert stats["slow"].median_ms >= 3.0 > stats["fast"].median_ms
    index, out = last["fast"]
    assert torch.equal(out, sets[index][0] + 1)
    assert seconds > 0.06


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
