"""How close a matmul problem's contenders come to its exact product, and how much of the tolerance they use.

    python bench/matmul_accuracy.py PROBLEM [--point TEMPLATE:JSON ...] [--seeds 3] [--atol 1e-2] [--rtol 1e-2]

For each input seed, the problem's inputs are multiplied in float64 (the "exact" product) and by each contender:
cuBLAS fp32 (the eager reference), cuBLAS with TF32 allowed, and every ``--point`` (a builtin template point,
params as JSON over the template's defaults and the problem's spec). Prints a Markdown row per contender and
seed: the largest absolute error against float64, and the largest error as a share of what the tolerance allows
at that element, ``|err| / (atol + rtol * |exact|)`` (above 1.0 the element fails; the harness compares against
the fp32 reference, whose own share is in its row).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agents.builtin.catalog import TEMPLATES, render  # noqa: E402
from agents.builtin.recognise import analyse  # noqa: E402
from tools.problem import build_model, exec_source, load_problem, make_inputs  # noqa: E402


def worst(out: torch.Tensor, exact: torch.Tensor, atol: float, rtol: float) -> tuple[float, float]:
    """The largest absolute error of ``out`` against ``exact`` and the largest share of the allowed error."""
    err = (out.double() - exact).abs()
    return err.max().item(), (err / (atol + rtol * exact.abs())).max().item()


def tf32_reference(reference: torch.nn.Module) -> Callable[..., torch.Tensor]:
    """``reference`` called with TF32 allowed in its matmuls (cuBLAS's TF32 GEMM); the switch restored after."""

    def run(*inputs: torch.Tensor) -> torch.Tensor:
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return reference(*inputs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem")
    parser.add_argument("--point", action="append", default=[], help="TEMPLATE:JSON params (repeatable)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--atol", type=float, default=1e-2)
    parser.add_argument("--rtol", type=float, default=1e-2)
    args = parser.parse_args()

    device = torch.device("cuda", torch.cuda.current_device())
    problem = load_problem(args.problem)
    shape = analyse(problem.info)
    if shape is None or shape.family != "matmul":
        raise SystemExit(f"{args.problem}: not a matmul problem")
    init = list(problem.module.get_init_inputs())
    reference = build_model(problem.module.Model, init, device, seed=0)
    contenders: list[tuple[str, Callable[..., torch.Tensor]]] = [
        ("cuBLAS fp32 (eager)", reference),
        ("cuBLAS TF32", tf32_reference(reference)),
    ]
    for text in args.point:
        template, _, params = text.partition(":")
        t = TEMPLATES.get(template)
        if t is None:
            raise SystemExit(f"--point {text!r}: no template {template!r}")
        try:
            point = t.normalise({**t.defaults(), **shape.extras(), **json.loads(params or "{}")})
        except ValueError as exc:  # bad JSON, or not a point of the template
            raise SystemExit(f"--point {text!r}: {exc}") from exc
        module = exec_source(render(template, point, "cuda"), f"{template}.py", "candidate")
        model = build_model(module.ModelNew, init, device, seed=0)
        contenders.append((f"`{template}` {json.dumps(json.loads(params or '{}'))}", model))

    print(f"{Path(args.problem).stem}: atol {args.atol:g}, rtol {args.rtol:g}, against float64\n")
    print("| contender | seed | max abs error | worst share of the tolerance |")
    print("|---|---|---|---|")
    for seed in range(1, args.seeds + 1):
        inputs = make_inputs(problem.module.get_inputs, device, seed)
        with torch.no_grad():
            exact = reference.double()(*[x.double() for x in inputs])
            reference.float()
            for name, fn in contenders:
                error, share = worst(fn(*inputs), exact, args.atol, args.rtol)
                print(f"| {name} | {seed} | {error:.3g} | {share:.3g} |")
        del exact


if __name__ == "__main__":
    main()
