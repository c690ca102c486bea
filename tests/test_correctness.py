"""The comparison rules, on tensors made here (no candidate code involved)."""

from __future__ import annotations

import pytest
import torch

from tools.correctness import changed, compare, fingerprints, layout_differences, pieces, tolerance


def ref() -> torch.Tensor:
    return torch.randn(64, 128, generator=torch.Generator().manual_seed(0))


def test_exact_match_passes_with_errors_reported() -> None:
    e = ref()
    result = compare(e.clone(), [e], [torch.zeros_like(e)], "relaxed", seed=1)
    assert result.passed
    assert result.max_abs_error == 0.0
    assert result.max_abs_error_vs_fp64 == 0.0


def test_errors_against_float64_come_from_the_stored_deviation() -> None:
    """The float64 reference is kept as its float32 deviation from the answer: both errors are measured from it."""
    e = ref()
    exact = e.double() + 1e-3  # the float64 answer, 1e-3 above the float32 one everywhere
    deviation = (exact - e.double()).float()
    a = e.clone()
    a[0, 0] += 5e-3
    result = compare(a, [e], [deviation], "relaxed", seed=1)
    assert result.passed
    assert result.reference_abs_error_vs_fp64 == pytest.approx(1e-3, rel=1e-4)
    assert result.max_abs_error_vs_fp64 == pytest.approx(4e-3, rel=1e-3)


@pytest.mark.parametrize(("policy", "passes"), [("relaxed", True), ("strict", False)])
def test_tf32_sized_error_passes_relaxed_only(policy: str, passes: bool) -> None:
    e = ref()
    # A relative error of 1e-3, about what TF32 leaves: inside 1e-2, outside 1e-4.
    result = compare(e * (1 + 1e-3), [e], None, policy, seed=1)  # type: ignore[arg-type]
    assert result.passed is passes


def test_error_beyond_tolerance_fails_with_count() -> None:
    e = ref()
    a = e.clone()
    a[3, 4] += 1.0
    result = compare(a, [e], None, "relaxed", seed=7)
    assert not result.passed
    assert "1 of 8192 values" in result.reason
    assert result.seed == 7


def test_nan_fails_even_where_the_tolerance_is_huge() -> None:
    e = ref()
    a = e.clone()
    a[0, 0] = float("nan")
    assert "NaN" in compare(a, [e], None, "relaxed", seed=1).reason


def test_inf_where_reference_is_finite_fails() -> None:
    e = ref()
    a = e.clone()
    a[1, 1] = float("inf")
    assert not compare(a, [e], None, "relaxed", seed=1).passed


@pytest.mark.parametrize(
    ("actual", "reason"),
    [
        (torch.zeros(64, 127), "shape"),
        (torch.zeros(64, 128, dtype=torch.float64), "dtype"),
        ((torch.zeros(64, 128), torch.zeros(1)), "returned 2 outputs"),
        ("not a tensor", "not a plain torch.Tensor"),
    ],
)
def test_structure_shape_dtype_are_checked(actual: object, reason: str) -> None:
    result = compare(actual, [ref()], None, "relaxed", seed=1)
    assert not result.passed and reason in result.reason


def test_tensor_subclass_is_rejected() -> None:
    class Lazy(torch.Tensor):
        pass

    e = ref()
    assert "not a plain torch.Tensor" in compare(e.clone().as_subclass(Lazy), [e], None, "relaxed", seed=1).reason


def test_tuple_outputs_compare_elementwise() -> None:
    a, b = ref(), ref() * 2
    assert compare((a.clone(), b.clone()), [a, b], None, "strict", seed=1).passed
    assert not compare((b.clone(), a.clone()), [a, b], None, "strict", seed=1).passed


def test_tolerances() -> None:
    assert tolerance("relaxed", torch.float32) == (1e-2, 1e-2)
    assert tolerance("strict", torch.float32) == (1e-4, 1e-4)
    assert tolerance("strict", torch.bfloat16) == (1e-2, 1e-2)
    for dtype in (torch.int64, torch.int32, torch.bool):
        assert tolerance("relaxed", dtype) == (0.0, 0.0)


@pytest.mark.parametrize("policy", ["relaxed", "strict"])
def test_integer_outputs_must_match_exactly(policy: str) -> None:
    index = torch.arange(1000, 1064)  # argmax-like: rtol=1e-2 would let each be ~10 off
    off_by_one = index.clone()
    off_by_one[5] += 1
    result = compare(off_by_one, [index], None, policy, seed=1)  # type: ignore[arg-type]
    assert not result.passed and "1 of 64 values differ (torch.int64 outputs must match exactly)" in result.reason
    assert result.max_abs_error == 1.0
    # Beyond 2**53 float64 rounds neighbours together; compared as integers they still differ.
    big = torch.tensor([2**60, 2**60 + 2])
    assert not compare(big + torch.tensor([0, 1]), [big], None, policy, seed=1).passed  # type: ignore[arg-type]
    assert compare(index.clone(), [index], [index], policy, seed=1).passed  # type: ignore[arg-type]
    mask = index % 3 == 0
    assert not compare(~mask, [mask], None, policy, seed=1).passed  # type: ignore[arg-type]


def test_fingerprints_tell_a_changed_input_from_an_untouched_one() -> None:
    x, y = ref(), ref()
    before = fingerprints([x, y, 3], limit=1000)
    assert fingerprints([x.clone(), y.clone(), 3], limit=1000) == before  # equal values: equal prints, NaN or not
    y[0, 0] += 1
    assert changed(before, fingerprints([x, y, 3], limit=1000)) == [1]
    swapped = x.clone()
    swapped[[0, 1]] = swapped[[1, 0]]  # the same values in another order
    assert fingerprints([swapped], limit=1000) != before[:1]
    with_nan = x.clone()
    with_nan[5, 5] = float("nan")
    assert fingerprints([with_nan], limit=1000) == fingerprints([with_nan.clone()], limit=1000) != before[:1]
    t = x.t()  # non-contiguous, printed a piece at a time
    assert fingerprints([t], limit=100) == fingerprints([t.contiguous()], limit=100)


def test_a_comparison_in_pieces_sees_every_value() -> None:
    """Pieces of at most ``limit`` elements cover a tensor exactly once, whatever its layout."""
    x = torch.arange(6 * 35 * 4).reshape(6, 35, 4).float()
    for layout in (x, x.transpose(0, 2), x[:, 1:, ::2]):
        seen = [p for (p,) in pieces([layout], limit=16)]
        assert all(p.numel() <= 16 for p in seen)
        assert torch.equal(torch.cat(seen), layout.reshape(-1))
    e = torch.randn(40, 50)
    for i, j in [(0, 0), (39, 49), (17, 3)]:
        a = e.clone()
        a[i, j] += 1.0
        result = compare(a, [e], None, "relaxed", seed=1, limit=64)
        assert not result.passed and "1 of 2000 values" in result.reason
        assert compare(e.t().contiguous().t(), [e], None, "strict", seed=1, limit=64).passed


def test_an_output_in_another_memory_layout_passes_and_is_named() -> None:
    e = torch.randn(4, 6)
    transposed = e.t().contiguous().t()  # the same values, column-major
    assert compare(transposed, [e], None, "strict", 0).passed
    (line,) = layout_differences([transposed], [e])
    assert line.startswith("layout: the output has strides (1, 4) where the reference's has (6, 1)"), line
    assert layout_differences([e.clone()], [e]) == []
    image = torch.randn(2, 3, 4, 5)
    lines = layout_differences([image.clone(), image.to(memory_format=torch.channels_last)], [image, image])
    assert len(lines) == 1 and lines[0].startswith("layout: output 1 has strides (60, 1, 15, 3)"), lines


def test_strides_of_size_one_dims_are_not_a_layout() -> None:
    e = torch.randn(5, 1, 7)
    odd = torch.as_strided(e.clone(), (5, 1, 7), (7, 99, 1))  # any stride is right where a dim has one element
    assert layout_differences([odd], [e]) == []
    assert layout_differences([torch.zeros(3)], [torch.zeros(4)]) == []  # a shape mismatch is compare's to report
