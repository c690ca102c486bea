"""Compare a candidate's outputs with the reference's: structure, shape, dtype, device and values.

Values pass when ``|cand - ref| <= atol + rtol * |ref|`` everywhere (torch.allclose's rule). A NaN in
the candidate's output never passes, whatever the reference holds. Errors are also measured against
a float64 run of the reference, so a user sees how far both are from the exact answer.

Every pass over values goes in pieces of a bounded number of elements (``pieces``), computed in float64 on the
outputs' device with the partial results kept there until the end: a 6 GB output costs a few hundred small kernels
and one synchronisation, and temporaries the size of a piece, not of the output (``tools.memory``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from tools.protocol import CheckResult, Policy

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


def pieces(tensors: list[torch.Tensor], limit: int, device: torch.device | None = None) -> Iterator[list[torch.Tensor]]:
    """Matching 1-D pieces of same-shaped tensors, at most ``limit`` elements each, in order, each on ``device``
    (default: the first tensor's), so an answer parked in host memory is compared without a whole copy of it there.

    Splits along the leading dims, so a non-contiguous tensor (a transposed answer) is copied a piece at a time.
    """
    first = tensors[0]
    to = first.device if device is None else device
    if first.dim() == 0 or first.numel() <= limit:
        if first.numel():
            yield [t.reshape(-1).to(to) for t in tensors]
        return
    rows = first.shape[0]
    per_row = first.numel() // rows
    if per_row > limit:
        for i in range(rows):
            yield from pieces([t[i] for t in tensors], limit, to)
        return
    step = max(1, limit // per_row)
    for i in range(0, rows, step):
        yield [t[i : i + step].reshape(-1).to(to) for t in tensors]


class _Max:
    """A running maximum kept on the device: no synchronisation until ``value``."""

    def __init__(self) -> None:
        self._best: torch.Tensor | None = None

    def add(self, x: torch.Tensor) -> None:
        if x.numel():
            m = x.max()
            self._best = m if self._best is None else torch.maximum(self._best, m)

    def value(self) -> float:
        return 0.0 if self._best is None else float(self._best)


def _structure(got: list[Any], expected: list[torch.Tensor], devices: list[Any]) -> str | None:
    """Why ``got`` cannot be compared value by value with ``expected`` (which belong on ``devices``), or None."""
    if len(got) != len(expected):
        return f"returned {len(got)} outputs, the reference {len(expected)}"
    for i, (a, e, device) in enumerate(zip(got, expected, devices, strict=True)):
        where = f"output {i}" if len(expected) > 1 else "output"
        if type(a) not in (torch.Tensor, torch.nn.Parameter):  # subclasses could compute lazily
            return f"{where} is a {type(a).__name__}, not a plain torch.Tensor"
        if a.shape != e.shape:
            return f"{where} has shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if a.dtype != e.dtype:
            return f"{where} has dtype {a.dtype}, expected {e.dtype}"
        if a.device != device:
            return f"{where} is on {a.device}, expected {device}"
    return None


def _compare_integers(a: torch.Tensor, e: torch.Tensor, where: str, seed: int, limit: int) -> CheckResult | None:
    """Integers and booleans must match exactly (through float64, int64 values above 2**53 would round together)."""
    wrong = torch.zeros((), dtype=torch.int64, device=a.device)
    worst = _Max()
    for pa, pe in pieces([a.detach(), e], limit):
        differ = pa != pe
        wrong += differ.sum()
        worst.add((pa.double() - pe.double()).abs()[differ])
    n_wrong = int(wrong)
    if not n_wrong:
        return None
    return CheckResult(
        seed=seed,
        passed=False,
        reason=f"{where}: {n_wrong} of {e.numel()} values differ ({e.dtype} outputs must match exactly)",
        max_abs_error=worst.value(),
    )


def compare(
    actual: Any,
    expected: list[torch.Tensor],
    deviation: list[torch.Tensor] | None,
    policy: Policy,
    seed: int,
    limit: int = 1 << 22,
    devices: list[Any] | None = None,
) -> CheckResult:
    """Compare one call's outputs; the first mismatch found is the reason.

    ``expected`` (and ``deviation``) may wait in host memory (``tools.answers.AnswerStore.view``): they are compared
    on the candidate's device a piece at a time. ``devices``: the device each expected output belongs on (default:
    where each is).
    ``deviation``: per output, the float64 reference minus ``expected`` (kept in the outputs' dtype: it is small, so
    little of it rounds away), from which the errors against float64 are measured; None where there is none.
    """
    got = flatten_outputs(actual)
    why = _structure(got, expected, devices or [e.device for e in expected])
    if why:
        return CheckResult(seed=seed, passed=False, reason=why)
    worst_abs = worst_rel = worst64 = ref64 = 0.0
    for i, (a, e) in enumerate(zip(got, expected, strict=True)):
        where = f"output {i}" if len(expected) > 1 else "output"
        atol, rtol = tolerance(policy, e.dtype)
        if not (e.is_floating_point() or e.is_complex()):
            failed = _compare_integers(a, e, where, seed, limit)
            if failed:
                return failed
            continue
        zero = torch.zeros((), dtype=torch.int64, device=a.device)
        nans, infs, n_bad = zero.clone(), zero.clone(), zero.clone()
        diff_max, rel_max, cand64, own64 = _Max(), _Max(), _Max(), _Max()
        dev = deviation[i] if deviation is not None else None
        for piece in pieces([a.detach(), e] + ([dev] if dev is not None else []), limit):
            a64, e64 = piece[0].double(), piece[1].double()
            if a.is_floating_point():
                nans += a64.isnan().sum()
                infs += (a64.isinf() != e64.isinf()).sum()
            finite = torch.isfinite(e64)
            diff = torch.where(finite, (a64 - e64).abs(), 0.0)
            n_bad += (diff > atol + rtol * e64.abs()).sum()
            diff_max.add(diff)
            rel_max.add(diff / e64.abs().clamp_min(atol))
            if dev is not None:
                d64 = piece[2].double()
                cand64.add(torch.where(finite, (a64 - e64 - d64).abs(), 0.0))
                own64.add(torch.where(finite, d64.abs(), 0.0))
        if int(nans):
            return CheckResult(seed=seed, passed=False, reason=f"{where} contains NaN")
        if int(infs):
            return CheckResult(
                seed=seed, passed=False, reason=f"{where} has Inf where the reference has none (or the reverse)"
            )
        max_abs, max_rel = diff_max.value(), rel_max.value()
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        if dev is not None:
            worst64, ref64 = max(worst64, cand64.value()), max(ref64, own64.value())
        if int(n_bad):
            return CheckResult(
                seed=seed,
                passed=False,
                reason=f"{where}: {int(n_bad)} of {e.numel()} values outside atol={atol:g} rtol={rtol:g} "
                f"(max abs error {max_abs:.3g})",
                max_abs_error=max_abs,
                max_rel_error=max_rel,
            )
    return CheckResult(
        seed=seed,
        passed=True,
        max_abs_error=worst_abs,
        max_rel_error=worst_rel,
        max_abs_error_vs_fp64=worst64 if deviation is not None else None,
        reference_abs_error_vs_fp64=ref64 if deviation is not None else None,
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


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_WEIGHTS: dict[tuple[str, int], torch.Tensor] = {}


def _weights(device: torch.device, n: int) -> torch.Tensor:
    """Random odd per-position weights, drawn once per device from the OS's entropy."""
    key = (str(device), n)
    if key not in _WEIGHTS:
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        _WEIGHTS[key] = (torch.randint(1, 1 << 31, (n,), generator=g, dtype=torch.int64) | 1).to(device)
    return _WEIGHTS[key]


def fingerprint(x: Any, limit: int = 1 << 22) -> int | None:
    """A position-weighted sum of a tensor's bit patterns (None for a non-tensor): equal contents give equal
    fingerprints, NaNs included, and any change of values or of their order changes it, but for a crafted one.

    Used where a copy would double the memory: to see that a candidate left its inputs alone, and that its output did
    not change after the call returned.
    """
    if not isinstance(x, torch.Tensor):
        return None
    t = x.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for k, (piece,) in enumerate(pieces([t], limit)):
        bits = piece.view(_BITS[piece.element_size()]).to(torch.int64)
        total += (bits * _weights(t.device, limit)[: bits.numel()]).sum() * (2 * k + 1)
    return int(total)


def fingerprints(values: list[Any], limit: int = 1 << 22) -> list[int | None]:
    return [fingerprint(v, limit) for v in values]


def changed(before: list[int | None], after: list[int | None]) -> list[int]:
    """Indices whose fingerprints differ."""
    return [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def to_float64(inputs: list[Any]) -> list[Any]:
    """Floating inputs as float64, each freed as soon as it is cast (the caller's list is consumed)."""
    out = []
    while inputs:
        x = inputs.pop(0)
        out.append(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x)
        del x
    return out
