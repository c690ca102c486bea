r"""Where a kernel's warps wait, instruction by instruction, from Nsight Compute's source page.

    ncu --section SourceCounters --section WarpStateStats --import-source no -k regex:NAME -c 1 -o REPORT CMD ...
    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
    python bench/ncu_stalls.py SASS.csv [--top 12]

For each kernel in the CSV: the share of all warp samples per state (``selected`` is a warp issuing,
``not_selected`` a ready warp another one beat to the scheduler; the rest are stalls), then the instructions with
the most stalled samples and their main reasons. A stall sample lands on the instruction the warp waits to issue:
a short-scoreboard stall on an FFMA is that FFMA waiting for a shared-memory read, a barrier stall shows on the
instruction after the barrier.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

ISSUING = ("selected", "not_selected")


@dataclass
class KernelStalls:
    """One kernel's samples: per state in all, and per instruction (address, SASS, {state: samples})."""

    name: str
    totals: dict[str, float]
    instructions: list[tuple[str, str, dict[str, float]]]


def read(path: Path) -> list[KernelStalls]:
    out: list[KernelStalls] = []
    header: list[str] = []
    for row in csv.reader(path.read_text().splitlines()):
        if row and row[0] == "Kernel Name":
            out.append(KernelStalls(row[1], {}, []))
            header = []
        elif not header:
            header = row
        elif out:
            states = {
                h[len("stall_") :]: float(v)
                for h, v in zip(header, row, strict=False)
                if h.startswith("stall_") and not h.endswith("(Not Issued)") and v not in ("", "-") and float(v)
            }
            out[-1].instructions.append((row[0], row[1].strip(), states))
            for state, n in states.items():
                out[-1].totals[state] = out[-1].totals.get(state, 0.0) + n
    return out


def report(kernel: KernelStalls, top: int) -> list[str]:
    total = sum(kernel.totals.values()) or 1.0
    lines = [f"### {kernel.name}: {total:,.0f} warp samples", "", "| state | samples | share |", "|---|---|---|"]
    for state, n in sorted(kernel.totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {state} | {n:,.0f} | {n / total:.1%} |")
    lines += ["", "| address | instruction | stalled samples | main reasons |", "|---|---|---|---|"]

    def stalled(states: dict[str, float]) -> float:
        return sum(n for s, n in states.items() if s not in ISSUING)

    for address, sass, states in sorted(kernel.instructions, key=lambda i: -stalled(i[2]))[:top]:
        reasons = sorted(((s, n) for s, n in states.items() if s not in ISSUING), key=lambda kv: -kv[1])[:3]
        words = ", ".join(f"{s} {n:,.0f}" for s, n in reasons)
        lines.append(f"| {address} | `{sass}` | {stalled(states):,.0f} | {words} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--top", type=int, default=12, help="instructions listed per kernel")
    args = parser.parse_args()
    kernels = read(args.csv)
    if not kernels:
        raise SystemExit(f"{args.csv}: no 'Kernel Name' line; expected ncu's source page as CSV")
    for kernel in kernels:
        print("\n".join(report(kernel, args.top)) + "\n")


if __name__ == "__main__":
    main()
