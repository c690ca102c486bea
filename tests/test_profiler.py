"""The profiler's diagnosis from a candidate's time and the baseline's roofline floor."""

from __future__ import annotations

from agents.profiler import diagnose


def test_memory_bound_with_percent_of_roofline() -> None:
    text, pct = diagnose(1.0, {"floor_ms": 0.5, "bound": "memory"})
    assert pct == 50.0 and text.startswith("memory-bound at 50.0%")


def test_launch_overhead_is_latency_bound() -> None:
    text, pct = diagnose(0.01, {"floor_ms": 0.0001, "bound": "memory"})
    assert text.startswith("latency-bound") and pct is not None and pct < 5


def test_faster_than_the_dram_floor_means_cache_resident() -> None:
    text, pct = diagnose(0.1, {"floor_ms": 0.2, "bound": "memory"})
    assert pct == 200.0 and text.startswith("cache-resident")


def test_no_floor_no_percentage() -> None:
    assert diagnose(1.0, {}) == ("no roofline floor known", None)
