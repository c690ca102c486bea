r"""One cuBLAS fp32 GEMM and builtin GEMMs on the same operands, to be profiled side by side under ncu.

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats \
        --section Occupancy -k regex:'gemm|matmul_' python3 bench/matmul_ncu.py [--size 4096] \
        [--point TEMPLATE:JSON ...]

Each runs once (ncu replays a kernel as often as its sections need); ncu names cuBLAS's kernel, whose name gives
its tile shape and pipeline depth. Without ``--point``: the SIMT template's 128x128, 8x8, two-blocks-an-SM point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agents.builtin.catalog import render  # noqa: E402
from tools.problem import exec_source  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096, help="M = N = K")
    parser.add_argument("--point", action="append", help="TEMPLATE:JSON params (repeatable)")
    args = parser.parse_args()
    points = args.point or ['matmul_cuda_simt:{"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2}']
    models = []
    for text in points:
        template, _, params = text.partition(":")
        source = render(template, json.loads(params or "{}"), "cuda")
        models.append(exec_source(source, f"<{template}>", "candidate").ModelNew())
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    torch.matmul(a, b)
    for model in models:
        model(a, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
