"""What rounding a convolution's operands costs a conv + pointwise tail problem, emulated on the CPU in float64.

    python bench/conv_half_accuracy.py PROBLEM [PROBLEM ...] [--batch 4] [--seed 1] [--atol 1e-2] [--rtol 1e-2]

The problem's convolution runs in float64 on operands rounded as a contender rounds them, so the only error left is
the rounding (a tensor core's fp32 accumulation adds its own, small beside it at these depths):

- ``fp32``: no rounding; what the reference computes with TF32 switched off.
- ``tf32 operands``: the input and the weight rounded to TF32 (10 mantissa bits): cuDNN's fp32 convolution with
  ``torch.backends.cudnn.allow_tf32`` on, PyTorch's default, so the eager reference itself.
- ``fp16 operands and result``: the input and the weight rounded to fp16, the convolution's result (without its
  bias) rounded to fp16 again: ``epilogue_cuda_half``, whose tail then adds the bias in fp32.
- ``bf16 operands and result``: the same in bfloat16 (7 mantissa bits), for contrast.

The tail runs as the reference's own forward in fp32 on that result. Prints a Markdown row per problem and contender:
the largest absolute error against the float64 reference, and the largest share of the tolerance,
``|err| / (atol + rtol * |exact|)`` (above 1.0 an element fails). Only the first ``--batch`` samples of each input
are used (a convolution treats samples alike), so a suite-sized problem runs in seconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.matmul_accuracy import worst  # noqa: E402
from tools.problem import build_model, load_problem, make_inputs  # noqa: E402

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def tf32(t: torch.Tensor) -> torch.Tensor:
    """``t`` (float32) rounded to TF32's 10 mantissa bits, half-way cases away from zero (as cvt.rna.tf32.f32)."""
    bits = t.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


# name -> (how the operands are rounded, how the result without its bias is rounded)
ROUNDINGS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "fp32": (lambda t: t.float(), lambda t: t.float()),
    "tf32 operands (the eager reference)": (tf32, lambda t: t.float()),
    "fp16 operands and result (`epilogue_cuda_half`)": (lambda t: t.half(), lambda t: t.half()),
    "bf16 operands and result": (lambda t: t.bfloat16(), lambda t: t.bfloat16()),
}


def bias_free(conv: nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``conv``'s convolution of ``x`` by ``weight``, without its bias."""
    dims = conv.weight.dim() - 2
    if isinstance(conv, nn.modules.conv._ConvTransposeNd):
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1]
        return fn(x, weight, None, conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation)
    if conv.padding_mode != "zeros":
        raise SystemExit(f"padding_mode {conv.padding_mode!r}: only zero padding is emulated")
    return (F.conv1d, F.conv2d, F.conv3d)[dims - 1](
        x, weight, None, conv.stride, conv.padding, conv.dilation, conv.groups
    )


def contender_errors(path: str, batch: int, seed: int, atol: float, rtol: float) -> list[tuple[str, float, float]]:
    """(contender, max abs error, worst share of the tolerance) for each rounding of ``path``'s convolution."""
    problem = load_problem(path)
    model = build_model(problem.module.Model, list(problem.module.get_init_inputs()), "cpu", seed=0)
    conv = next((m for m in model.modules() if isinstance(m, CONVS)), None)
    if conv is None:
        raise SystemExit(f"{path}: no convolution module in its Model")
    inputs = [
        x[:batch] if isinstance(x, torch.Tensor) else x for x in make_inputs(problem.module.get_inputs, "cpu", seed)
    ]
    x = next(t for t in inputs if isinstance(t, torch.Tensor))
    out = []
    with torch.no_grad():
        exact = model.double()(*[t.double() if isinstance(t, torch.Tensor) else t for t in inputs])
        model.float()
        for name, (operand, result) in ROUNDINGS.items():
            heavy = result(bias_free(conv, operand(x).double(), operand(conv.weight).double())).float()
            if conv.bias is not None:
                heavy = heavy + conv.bias.view(-1, *[1] * (heavy.dim() - 2))
            conv.forward = lambda _, v=heavy: v  # the reference's tail, in fp32, on that result
            try:
                error, share = worst(model(*inputs), exact, atol, rtol)
            finally:
                del conv.forward  # the class's forward again
            out.append((name, error, share))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--batch", type=int, default=4, help="samples of each input used (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--atol", type=float, default=1e-2)
    parser.add_argument("--rtol", type=float, default=1e-2)
    args = parser.parse_args()
    print(f"atol {args.atol:g}, rtol {args.rtol:g}, against float64; first {args.batch} samples, seed {args.seed}\n")
    print("| problem | contender | max abs error | worst share of the tolerance |")
    print("|---|---|---|---|")
    for path in args.problems:
        for name, error, share in contender_errors(path, args.batch, args.seed, args.atol, args.rtol):
            print(f"| {Path(path).stem} | {name} | {error:.3g} | {share:.3g} |")


if __name__ == "__main__":
    main()
