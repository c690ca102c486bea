"""bench/host_device_split.py picks its points as the builtin planner would send them, and bench/kernel_times.py lists a
call's kernels (CPU: aten ops; no launch here)."""

from __future__ import annotations

import pytest
import torch

from bench.host_device_split import points_for
from bench.kernel_times import kernel_lines, kernel_times
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


def test_kernel_times_lists_each_op_of_a_call_costliest_first() -> None:
    x = torch.randn(384, 384)

    def call(a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ a) + 1.0

    times = kernel_times(call, [x], torch.device("cpu"), calls=3)
    by_name = {k.name: k for k in times}
    assert {"aten::mm", "aten::relu", "aten::add"} <= set(by_name), sorted(by_name)
    assert by_name["aten::mm"].launches_per_call == 1  # counted over 3 calls, divided by 3
    assert [k.us_per_call for k in times] == sorted((k.us_per_call for k in times), reverse=True)
    assert times[0].us_per_call > 0 and times[-1].us_per_call >= 0  # which op costs most is the machine's to say
    lines = kernel_lines(times, top=1)
    assert lines[0].startswith(f"- {times[0].us_per_call:.1f} µs (") and lines[0].endswith(f"`{times[0].name}`")
    assert lines[1].endswith(f"in {len(times) - 1} other kernels") and lines[-1].startswith("- total ")
    with pytest.raises(ValueError, match="calls must be at least 1"):
        kernel_times(call, [x], torch.device("cpu"), calls=0)
    with pytest.raises(RuntimeError, match="recorded no CPU events for 5 calls"):  # nothing ran: not "0 µs"
        kernel_times(lambda: None, [], torch.device("cpu"))
