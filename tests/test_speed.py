"""When a candidate may be called faster (tools.speed): the paired ratio's bootstrap interval and the medians."""

from __future__ import annotations

import numpy as np
import pytest

from agents.critic import shown_faster
from tools.speed import describe, median_interval, paired_intervals, undecided, verdict


def _times(median: float, n: int = 60, spread: float = 0.02, seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * (1 + spread * rng.standard_normal(n)))


def test_a_clear_speedup_has_an_interval_above_1_that_holds_its_median() -> None:
    samples = {"eager": _times(2.0, seed=1), "candidate": _times(1.0, seed=2)}
    (low, high) = paired_intervals(samples, "candidate")["eager/candidate"]
    assert 1.9 < low < 2.0 < high < 2.1
    assert verdict((low, high), 2.0) == "faster"
    assert verdict((1 / high, 1 / low), 0.5) == "slower"


def test_equal_times_are_not_distinguishable_and_a_lone_pair_decides_nothing() -> None:
    samples = {"eager": _times(1.0, spread=0.1, seed=3), "candidate": _times(1.0, spread=0.1, seed=4)}
    interval = paired_intervals(samples, "candidate")["eager/candidate"]
    assert interval[0] < 1.0 < interval[1]
    assert verdict(interval, 1.0) == "not distinguishable"
    assert undecided(samples, "candidate") == ["eager"]
    assert median_interval(np.array([1.5])) is None and verdict(None, 1.5) is None


def test_pairs_and_medians_that_disagree_are_no_evidence() -> None:
    # The per-trial pairs say faster, the medians slower: timing noise, not a speedup
    assert verdict((1.05, 1.2), 0.98) == "not distinguishable"
    assert verdict((0.8, 0.95), 1.01) == "not distinguishable"


def test_the_interval_is_the_same_for_the_same_samples() -> None:
    ratios = np.asarray(_times(1.3, n=200, spread=0.2))
    assert median_interval(ratios, seed=7) == median_interval(ratios, seed=7)


@pytest.mark.parametrize(
    ("candidate", "shown"),
    [
        ({"speedup_vs_best": 1.4, "speed": "faster", "speedup_interval": [1.3, 1.5]}, True),
        ({"speedup_vs_best": 1.02, "speed": "not distinguishable", "speedup_interval": [0.97, 1.06]}, False),
        ({"speedup_vs_best": 1.02}, True),  # saved before intervals: its point estimate, as then
        ({"speedup_vs_best": 0.9}, False),
    ],
)
def test_the_critic_keeps_as_best_only_a_candidate_shown_faster(candidate: dict, shown: bool) -> None:
    assert shown_faster(candidate) is shown  # type: ignore[arg-type]


def test_a_speedup_is_written_with_its_interval_and_what_it_allows_saying() -> None:
    assert describe(1.4771, (1.4523, 1.5012), "faster") == "1.477× (95%: 1.452-1.501, faster)"
    assert describe(1.4771, None, None) == "1.477×"
    assert describe(None, None, None) == "—"
