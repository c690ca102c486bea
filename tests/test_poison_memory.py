"""Poisoning freed memory before a watched call must not grow the memory the process holds, call after call."""

from __future__ import annotations

import pytest
import torch

from tools.runtime_checks import _unserved, poison

MIB = 1 << 20


def test_an_output_an_inactive_block_can_hold_needs_no_block_of_its_own() -> None:
    assert _unserved([64 * MIB], [64 * MIB]) == []
    assert _unserved([128 * MIB], [64 * MIB]) == []
    # One block serves one output: the second output of that size needs memory of its own.
    assert _unserved([64 * MIB], [64 * MIB, 64 * MIB]) == [64 * MIB]
    # The smallest block that fits is used, leaving the larger one for the larger output.
    assert _unserved([64 * MIB, 200 * MIB], [100 * MIB, 50 * MIB]) == []
    assert _unserved([32 * MIB], [64 * MIB]) == [64 * MIB]
    # Small outputs come from the allocator's small pool, which the large blocks do not serve.
    assert _unserved([64 * MIB], [4096]) == [4096]
    assert _unserved([], [64 * MIB, 4096]) == [64 * MIB, 4096]


@pytest.mark.gpu
def test_poisoning_before_each_of_many_calls_keeps_the_memory_held_to_what_the_calls_need() -> None:
    device = torch.device("cuda")
    torch.cuda.empty_cache()
    x = torch.randn(64 * MIB // 4, device=device)
    like = [torch.empty_like(x, device="meta")]
    reserved = []
    for _ in range(12):
        poison(device, like)
        out = x * 2  # the "candidate's" output: a new tensor of the poisoned size
        assert torch.equal(out, x * 2)
        del out
        reserved.append(torch.cuda.memory_reserved(device))
    # What the loop itself holds at once: the input, the output, the check's x * 2 and torch.equal's 16 MiB mask, and
    # a 2 MiB segment of the small pool; poisoning may add one output-sized block where no free one held it.
    needs = 3 * 64 * MIB + 16 * MIB + 2 * MIB
    assert max(reserved) <= needs + 64 * MIB, [r // MIB for r in reserved]
    assert reserved[-1] == reserved[2]  # steady from the third call on


@pytest.mark.gpu
def test_an_output_from_fresh_device_memory_reads_the_poison() -> None:
    device = torch.device("cuda")
    stale = torch.full((16 * MIB // 4,), 7.0, device=device)
    del stale
    torch.cuda.empty_cache()  # the values go back to the driver, which may hand the memory out again
    like = [torch.empty(16 * MIB // 4, device="meta")]
    poison(device, like)
    fresh = torch.empty(16 * MIB // 4, device=device)
    assert torch.isnan(fresh).all()
