"""Whether one contender is faster than another, with evidence: the paired ratio's confidence interval.

A timing phase runs every contender once per trial, on the same fresh inputs, back to back; the ratio of two
contenders' times within one trial cancels what slows the whole machine for a moment. The median of those per-trial
ratios is the speedup (``tools.timing.paired_ratios``); its bootstrap interval says how sure that figure is. A
contender is called faster only when the whole interval lies above 1 (by ``MIN_EFFECT`` at least) and the ratio of
the two medians agrees (a median ratio below 1 means the pairs and the medians tell different stories: timing
noise, not evidence).
Otherwise the two are "not distinguishable", and no winner is picked on noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000
# Differences under 1% are called neither way: identical work measured 1.000-1.002× and 1.001-1.079× on a busy
# 2-core machine with every trial paired (bench/RESULTS.md, issue 39), and no rerun reproduces a gain that small.
MIN_EFFECT = 0.01
_CHUNK = 100  # resamples drawn at once: 100 × 10,000 trials of float64 is 8 MB

Verdict = Literal["faster", "slower", "not distinguishable"]


def per_trial_ratios(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """a's time over b's in each trial where both read a time (a timer can read 0 below its resolution)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) != len(y):
        return np.zeros(0)
    both = (x > 0) & (y > 0)
    return x[both] / y[both]


def median_interval(ratios: np.ndarray, seed: int = 0, resamples: int = RESAMPLES) -> tuple[float, float] | None:
    """The ``CONFIDENCE`` percentile-bootstrap interval of the median of ``ratios``; None under 2 of them."""
    if len(ratios) < 2:
        return None
    rng = np.random.default_rng(seed)
    medians = []
    for start in range(0, resamples, _CHUNK):
        draws = rng.integers(0, len(ratios), size=(min(_CHUNK, resamples - start), len(ratios)))
        medians.append(np.median(ratios[draws], axis=1))
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(np.concatenate(medians), [tail, 100 - tail])
    return float(low), float(high)


def paired_intervals(samples: dict[str, list[float]], of: str, seed: int = 0) -> dict[str, tuple[float, float]]:
    """For every other contender ``b``: ``"b/of"``, the interval of b's time over ``of``'s (of's speedup over b)."""
    out = {}
    for b, times in samples.items():
        if b != of:
            interval = median_interval(per_trial_ratios(times, samples[of]), seed)
            if interval is not None:
                out[f"{b}/{of}"] = interval
    return out


def verdict(interval: tuple[float, float] | None, medians_ratio: float | None) -> Verdict | None:
    """``faster`` / ``slower``: the interval of the speedup lies wholly above 1 + ``MIN_EFFECT`` / below its inverse
    and the ratio of the medians is on the same side of 1; else ``not distinguishable``. None without an interval (a
    report saved before intervals)."""
    if interval is None or medians_ratio is None:
        return None
    low, high = interval
    if low > 1.0 + MIN_EFFECT and medians_ratio > 1.0:
        return "faster"
    if high < 1.0 / (1.0 + MIN_EFFECT) and medians_ratio < 1.0:
        return "slower"
    return "not distinguishable"


def undecided(samples: dict[str, list[float]], of: str, seed: int = 0) -> list[str]:
    """The contenders ``of`` cannot yet be called faster or slower than (a cheaper bootstrap: asked between trials)."""
    out = []
    for b, times in samples.items():
        if b == of:
            continue
        x, y = np.asarray(times, dtype=np.float64), np.asarray(samples[of], dtype=np.float64)
        interval = median_interval(per_trial_ratios(times, samples[of]), seed, resamples=200)
        ratio = float(np.median(x) / np.median(y)) if len(x) and len(y) and np.median(y) > 0 else None
        if verdict(interval, ratio) == "not distinguishable":
            out.append(b)
    return out


def describe(speedup: float | None, interval: tuple[float, float] | None, said: Verdict | None) -> str:
    """``1.477× (95%: 1.452-1.501, faster)``; the bare figure where there is no interval."""
    if speedup is None:
        return "—"
    if interval is None or said is None:
        return f"{speedup:.3f}×"
    return f"{speedup:.3f}× ({CONFIDENCE:.0%}: {interval[0]:.3f}-{interval[1]:.3f}, {said})"
