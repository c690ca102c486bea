"""A batch's summary: KernelBench's fast_p, geometric means of speedups, tokens, dollars, wall time.

- fast_p (KernelBench): the fraction of the problems whose search produced a correct kernel that is more
  than p times faster than the baseline: eager PyTorch (``fast_p_vs_eager``) or the faster of eager and
  torch.compile (``fast_p_vs_best``). fast_0 is the correctness rate. A problem that failed to load or
  run counts in the denominator (it produced no correct kernel); a pending one does not (not run yet).
- geometric means: over the same problems, of the result's speedup, where the result is the selected
  kernel, or the reference where none beat it: a problem that failed, whose kernel is incorrect or
  slower than the reference, counts as 1.0 (as Gimlet Labs reported).
- per group: the same summary over the problems of each folder (KernelBench reports each level apart).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from typing import Any

from graphs.batch.rows import FAILED, NO_FAMILY, group_of

FAST_P = (0.0, 1.0, 1.5, 2.0)


def counted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that take part in the rates: everything that was attempted."""
    return [r for r in rows if r.get("status") != "pending"]


def fast_p(rows: list[dict[str, Any]], p: float, key: str = "kernel_speedup_vs_eager") -> float | None:
    """KernelBench's fast_p over the attempted rows; None when none was attempted."""
    rows = counted(rows)
    if not rows:
        return None
    return sum(bool(r.get("kernel_correct")) and (r.get(key) or 0.0) > p for r in rows) / len(rows)


def result_speedup(row: dict[str, Any], key: str) -> float | None:
    """The speedup a problem's result stands for in a geometric mean; None: not measured (no compile)."""
    if row.get("status") != "done":
        return 1.0
    value = row.get(key)
    if value is None:
        return None
    return 1.0 if row.get("verified") is False else max(1.0, float(value))


def geomean(rows: list[dict[str, Any]], key: str) -> float | None:
    """Geometric mean of ``result_speedup``; None when no finished problem measured ``key``."""
    rows = counted(rows)
    if not any(r.get("status") == "done" and r.get(key) is not None for r in rows):
        return None
    values = [v for r in rows if (v := result_speedup(r, key)) is not None]
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("status") == "done"]
    attempted = counted(rows)
    kernels = [r for r in done if not r.get("reference_stands")]
    return {
        "problems": len(rows),
        "attempted": len(attempted),
        "done": len(done),
        "pending": len(rows) - len(attempted),
        "failed": sum(r.get("status") in FAILED for r in rows),
        "correctness_rate": fast_p(rows, 0.0),
        "fast_p_vs_eager": {f"{p:g}": fast_p(rows, p) for p in FAST_P},
        "fast_p_vs_best": {f"{p:g}": fast_p(rows, p, "kernel_speedup_vs_best") for p in FAST_P},
        "geomean_vs_eager": geomean(rows, "speedup_vs_eager"),
        "geomean_vs_compile": geomean(rows, "speedup_vs_compile"),
        "geomean_vs_best": geomean(rows, "speedup_vs_best"),
        # The selected result (a kernel, or the reference where it stands) is correct: of the finished rows.
        "results_verified_rate": (sum(r.get("verified") is True for r in done) / len(done)) if done else None,
        "recognised": sum(r.get("family") not in (None, NO_FAMILY) for r in rows),
        "kernels_selected": len(kernels),
        "kernels_verified_fresh": sum(bool(r.get("fresh_check") and r["fresh_check"]["accepted"]) for r in kernels),
        "kernels_verified": sum(r.get("verified") is True for r in kernels),
        "candidates": sum(r.get("candidates") or 0 for r in rows),
        "tokens": sum(r.get("tokens") or 0 for r in rows),
        "dollars": sum(r.get("dollars") or 0.0 for r in rows),
        "search_wall_s": sum(r.get("search_wall_s") or 0.0 for r in rows),
        **memory_summary(rows),
    }


def memory_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the rows whose jobs reported their memory (tools.memory): the largest and median job peak over one eager
    forward's, and the range of the pre-check's estimate over the measured peak."""
    measured = [r for r in rows if r.get("peak_over_eager") and r.get("memory_estimate_bytes")]
    if not measured:
        return {}
    ratios = sorted(r["peak_over_eager"] for r in measured)
    estimates = [r["memory_estimate_bytes"] / r["peak_bytes"] for r in measured]
    return {
        "memory_measured": len(measured),
        "peak_over_eager_max": ratios[-1],
        "peak_over_eager_median": statistics.median(ratios),
        "estimate_over_peak_min": min(estimates),
        "estimate_over_peak_max": max(estimates),
    }


def _natural(name: str) -> list[str | int]:
    # level2 before level10; the split alternates text and digits, so equal positions compare alike.
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]


def by_group(
    rows: list[dict[str, Any]], summary: Callable[[list[dict[str, Any]]], dict[str, Any]] = summarise
) -> dict[str, dict[str, Any]]:
    """``summary`` of the rows of each group (the problem file's folder: KernelBench's levels), in natural order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    return {name: summary(groups[name]) for name in sorted(groups, key=_natural)}
