"""Compare a candidate's outputs with the reference's: structure, shape, dtype, device and values.

Values pass when ``|cand - ref| <= atol + rtol * |ref|`` everywhere (torch.allclose's rule). A NaN in
the candidate's output never passes, whatever the reference holds. Errors are also measured against
a float64 run of the reference, so a user sees how far both are from the exact answer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from sandbox.protocol import CheckResult, Policy

# (atol, rtol) per policy and output dtype. "relaxed" is the research's rule (1e-2 for everything);
# "strict" holds fp32 to 1e-4, which rules out TF32 or bf16 shortcuts in fp32 problems.
TOLERANCES: dict[Policy, dict[torch.dtype, tuple[float, float]]] = {
    "relaxed": {},
    "strict": {
        torch.float64: (1e-7, 1e-7),
        torch.float32: (1e-4, 1e-4),
        torch.float16: (1e-3, 1e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
}
RELAXED = (1e-2, 1e-2)


def tolerance(policy: Policy, dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for one output dtype under a policy; integer and bool outputs must match exactly."""
    if not (dtype.is_floating_point or dtype.is_complex):
        # Indices, counts and masks have one right answer: rtol=1e-2 would pass an argmax 10 off at 1000.
        return (0.0, 0.0)
    return TOLERANCES[policy].get(dtype, RELAXED if policy == "relaxed" else (1e-4, 1e-4))


def flatten_outputs(out: Any) -> list[Any]:
    leaves, _ = tree_flatten(out)
    return leaves


def compare(
    actual: Any,
    expected: list[torch.Tensor],
    expected64: list[torch.Tensor] | None,
    policy: Policy,
    seed: int,
) -> CheckResult:
    """Compare one call's outputs; the first mismatch found is the reason."""
    got = flatten_outputs(actual)
    if len(got) != len(expected):
        return CheckResult(
            seed=seed, passed=False, reason=f"returned {len(got)} outputs, the reference {len(expected)}"
        )
    worst_abs = worst_rel = worst64 = ref64 = 0.0
    for i, (a, e) in enumerate(zip(got, expected, strict=True)):
        where = f"output {i}" if len(expected) > 1 else "output"
        if type(a) not in (torch.Tensor, torch.nn.Parameter):  # subclasses could compute lazily
            return CheckResult(
                seed=seed, passed=False, reason=f"{where} is a {type(a).__name__}, not a plain torch.Tensor"
            )
        if a.shape != e.shape:
            return CheckResult(
                seed=seed, passed=False, reason=f"{where} has shape {tuple(a.shape)}, expected {tuple(e.shape)}"
            )
        if a.dtype != e.dtype:
            return CheckResult(seed=seed, passed=False, reason=f"{where} has dtype {a.dtype}, expected {e.dtype}")
        if a.device != e.device:
            return CheckResult(seed=seed, passed=False, reason=f"{where} is on {a.device}, expected {e.device}")
        if a.is_floating_point() and bool(torch.isnan(a).any()):
            return CheckResult(seed=seed, passed=False, reason=f"{where} contains NaN")
        atol, rtol = tolerance(policy, e.dtype)
        if not (e.is_floating_point() or e.is_complex()):
            # Compared as integers: through float64, int64 values above 2**53 would round together.
            wrong = a.detach() != e
            if bool(wrong.any()):
                return CheckResult(
                    seed=seed,
                    passed=False,
                    reason=f"{where}: {int(wrong.sum())} of {e.numel()} values differ ({e.dtype} outputs must match "
                    "exactly)",
                    max_abs_error=float((a.detach().double() - e.double()).abs().max()),
                )
            continue
        a64, e64 = a.detach().double(), e.double()
        if a.is_floating_point() and not torch.equal(torch.isinf(a64), torch.isinf(e64)):
            return CheckResult(
                seed=seed, passed=False, reason=f"{where} has Inf where the reference has none (or the reverse)"
            )
        finite = torch.isfinite(e64)
        diff = torch.where(finite, (a64 - e64).abs(), torch.zeros_like(e64))
        bad = diff > atol + rtol * e64.abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff / e64.abs().clamp_min(atol)).max()) if diff.numel() else 0.0
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        if expected64 is not None and diff.numel():
            x64 = expected64[i]
            worst64 = max(worst64, float(torch.where(finite, (a64 - x64).abs(), 0.0).max()))
            ref64 = max(ref64, float(torch.where(finite, (e64 - x64).abs(), 0.0).max()))
        if bool(bad.any()):
            n_bad = int(bad.sum())
            return CheckResult(
                seed=seed,
                passed=False,
                reason=f"{where}: {n_bad} of {e.numel()} values outside atol={atol:g} rtol={rtol:g} "
                f"(max abs error {max_abs:.3g})",
                max_abs_error=max_abs,
                max_rel_error=max_rel,
            )
    return CheckResult(
        seed=seed,
        passed=True,
        max_abs_error=worst_abs,
        max_rel_error=worst_rel,
        max_abs_error_vs_fp64=worst64 if expected64 is not None else None,
        reference_abs_error_vs_fp64=ref64 if expected64 is not None else None,
    )


def layout_differences(actual: list[Any], expected: list[torch.Tensor]) -> list[str]:
    """A line for each output laid out in memory otherwise than the reference's. Values are compared whatever the
    layout (a channels-last or transposed answer passes), but a caller that assumes the reference's layout, through
    ``.view`` or a raw pointer, would read it wrongly or fail. Strides of size-1 dims are ignored: any value is
    right there."""
    out = []
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if not isinstance(a, torch.Tensor) or a.shape != e.shape:
            continue
        dims = [d for d, n in enumerate(e.shape) if n > 1]
        if [a.stride(d) for d in dims] != [e.stride(d) for d in dims]:
            where = f"output {i}" if len(expected) > 1 else "the output"
            out.append(
                f"layout: {where} has strides {tuple(a.stride())} where the reference's has {tuple(e.stride())} "
                "(the same values in another memory order; code that relies on the reference's may fail or misread it)"
            )
    return out


def mutated_inputs(pristine: list[Any], used: list[Any]) -> list[int]:
    """Indices of tensor inputs whose contents the candidate changed."""
    changed = []
    for i, (p, u) in enumerate(zip(pristine, used, strict=True)):
        if isinstance(p, torch.Tensor) and not (u.shape == p.shape and torch.equal(u, p)):
            changed.append(i)
    return changed


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def to_float64(inputs: list[Any]) -> list[Any]:
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
