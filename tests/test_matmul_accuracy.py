"""bench/matmul_accuracy.py's measures, on the CPU (the script itself needs a GPU)."""

from __future__ import annotations

import pytest
import torch

from bench.matmul_accuracy import tf32_reference, worst


def test_worst_gives_the_largest_error_and_the_largest_share_of_the_tolerance() -> None:
    exact = torch.tensor([0.0, 10.0, -3.0], dtype=torch.float64)
    out = torch.tensor([0.005, 10.2, -3.0], dtype=torch.float32)
    error, share = worst(out, exact, atol=1e-2, rtol=1e-2)
    assert error == pytest.approx(0.2, rel=1e-5)  # at 10.0
    assert share == pytest.approx(0.2 / (1e-2 + 1e-2 * 10.0), rel=1e-5)  # there too: 1.82, the element fails
    near_zero = torch.tensor([0.009, 10.0, -3.0])
    assert worst(near_zero, exact, 1e-2, 1e-2)[1] == pytest.approx(0.9, rel=1e-5)  # passes, barely


def test_the_tf32_reference_restores_the_switch_even_when_the_call_fails() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    seen = []

    def model(a: torch.Tensor) -> torch.Tensor:
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        tf32_reference(model)(torch.zeros(1))  # type: ignore[arg-type]
    assert seen == [True] and torch.backends.cuda.matmul.allow_tf32 == before
