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


CPU_BASELINE = {"floor_ms": 0.05, "bound": "memory", "device": {"cpu": "a CPU", "llc_bytes": str(32 << 20)}}


def test_a_problem_that_fits_in_the_last_level_cache_is_not_called_memory_bound() -> None:
    """1 MiB of traffic on a CPU with a 32 MiB L3, at 25% of the bytes floor: the floor does not explain the time."""
    text, pct = diagnose(0.2, CPU_BASELINE, bytes_moved=1 << 20)
    assert pct == 25.0
    assert text.startswith("cache-resident: its 1 MiB") and "32 MiB last-level cache" in text
    assert "memory-bound" not in text


def test_a_problem_larger_than_the_cache_stays_memory_bound() -> None:
    text, _ = diagnose(0.2, CPU_BASELINE, bytes_moved=64 << 20)
    assert text.startswith("memory-bound at 25.0%")


def test_a_gpu_problem_is_measured_against_its_l2() -> None:
    baseline = {"floor_ms": 0.01, "bound": "memory", "device": {"gpu": "a GPU", "l2_bytes": str(50 << 20)}}
    text, _ = diagnose(0.1, baseline, bytes_moved=8 << 20)
    assert "fit in the 50 MiB L2" in text


def test_compute_bound_is_left_to_the_floor() -> None:
    baseline = {**CPU_BASELINE, "bound": "compute"}
    text, _ = diagnose(0.2, baseline, bytes_moved=1 << 20)
    assert text.startswith("compute-bound at 25.0%")
