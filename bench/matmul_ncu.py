r"""One cuBLAS fp32 GEMM and one builtin SIMT GEMM on the same operands, to be profiled side by side under ncu.

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats \
        --section Occupancy -k regex:'gemm|matmul_simt' -c 2 python3 bench/matmul_ncu.py [--size 4096] [--point JSON]

Each runs once (ncu replays a kernel as often as its sections need); ncu names cuBLAS's kernel, whose name gives
its tile shape and pipeline depth.
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
    parser.add_argument("--point", default='{"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2}')
    args = parser.parse_args()
    source = render("matmul_cuda_simt", json.loads(args.point), "cuda")
    simt = exec_source(source, "<matmul_cuda_simt>", "candidate").ModelNew()
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    torch.matmul(a, b)
    simt(a, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
