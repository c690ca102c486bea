"""The comparison rules, on tensors made here (no candidate code involved)."""

from __future__ import annotations

import pytest
import torch

from tools.correctness import compare, layout_differences, mutated_inputs, tolerance


def ref() -> torch.Tensor:
    return torch.randn(64, 128, generator=torch.Generator().manual_seed(0))


def test_exact_match_passes_with_errors_reported() -> None:
    e = ref()
    result = compare(e.clone(), [e], [e.double()], "relaxed", seed=1)
    assert result.passed
    assert result.max_abs_error == 0.0
    assert result.max_abs_error_vs_fp64 == 0.0


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


def test_mutated_inputs() -> None:
    x, y = ref(), ref()
    used = [x.clone(), y.clone(), 3]
    used[1][0, 0] += 1
    assert mutated_inputs([x, y, 3], used) == [1]


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
