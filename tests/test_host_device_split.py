"""bench/host_device_split.py picks its points as the builtin planner would send them (CPU: no launch here)."""

from __future__ import annotations

from bench.host_device_split import points_for
from tests.conftest import PROBLEMS

SUM = str(PROBLEMS / "suite" / "sum_lastdim_4096x16384.py")


def test_the_default_points_are_the_seeds_with_the_problems_facts() -> None:
    points = points_for(SUM, [], [])
    assert len(points) >= 3
    # The op and its dims ride along: without them a reduce template renders a sum over every dim.
    assert all(p["op"] == "sum" and '"dims": [1]' in p["spec"] for _, p in points)


def test_a_sweep_varies_the_first_seed_and_a_named_point_keeps_the_facts() -> None:
    swept = points_for(SUM, [], ["tpr=32,64", "unroll=2,4"])
    assert sorted((p["tpr"], p["unroll"]) for _, p in swept) == [(32, 2), (32, 4), (64, 2), (64, 4)]
    ((template, p),) = points_for(SUM, ['reduce_cuda_rows:{"tpr": 16}'], [])
    assert template == "reduce_cuda_rows" and p["tpr"] == 16 and p["op"] == "sum"


def test_a_named_point_of_a_template_outside_the_seeds_keeps_the_facts_too() -> None:
    ((template, p),) = points_for(SUM, ['reduce_cuda_inner:{"bx": 32}'], [])
    assert template == "reduce_cuda_inner" and p["bx"] == 32 and p["op"] == "sum" and '"dims": [1]' in p["spec"]
