r"""The main loop of a builtin GEMM point in SASS: its instruction mix and its FFMAs' register-bank conflicts.

    python bench/ffma_banks.py 'matmul_cuda_simt:{"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2}' ...

Needs no GPU: each point is rendered by the catalog, its CUDA source compiled by ``nvcc -cubin -arch=sm_90`` and
disassembled by ``cuobjdump -sass`` (which calls ``nvdisasm``; both are in the CUDA toolkit, or in the pip wheels
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm``, under ``nvidia/cu13/bin``). The main loop is taken to be
the longest backward branch. An FFMA reads three registers; the ones marked ``.reuse`` come from the operand
cache, and two of the others in the same bank (register number mod 2) cost the dispatch an extra cycle: the
"conflicts" column counts such FFMAs. ptxas, not the CUDA source, chooses the registers.

Where ptxas placed the loads, as well: for each shared-memory load, the number of instructions until its result is
first read (the loop taken as repeating; a warp waits for the read's latency where that is small), and the index
in the loop of each global load (the step's next tile: the later, the less of the step hides its latency).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.builtin.catalog import render  # noqa: E402
from tools.compile import embedded_cuda_sources  # noqa: E402

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_FFMA = re.compile(r"(-?R\d+(?:\.reuse)?),\s*(-?R\d+(?:\.reuse)?),\s*(-?R\d+(?:\.reuse)?)$")


def sass_of(point: str, workdir: Path) -> str:
    template, _, params = point.partition(":")
    sources = embedded_cuda_sources(render(template, json.loads(params or "{}"), "cuda"))
    if len(sources) != 1:
        raise SystemExit(f"{template}: {len(sources)} CUDA sources in the rendered module, expected one")
    cu, cubin = workdir / "kernel.cu", workdir / "kernel.cubin"
    cu.write_text(sources[0].text)
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-o", str(cubin), str(cu)], check=True)
    return subprocess.run(["cuobjdump", "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout


def main_loop(sass: str) -> list[tuple[str, str]]:
    """(opcode, operands) of the instructions inside the longest backward branch."""
    code = [(int(m[1], 16), m[2], m[3].strip()) for m in map(_LINE.match, sass.splitlines()) if m]
    best = (0, -1)
    for addr, op, rest in code:
        found = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        target = int(found[1], 16) if found else addr
        if target < addr and addr - target > best[1] - best[0]:
            best = (target, addr)
    return [(op, rest) for addr, op, rest in code if best[0] <= addr <= best[1]]


def conflicts(loop: list[tuple[str, str]]) -> tuple[int, int]:
    """(FFMAs, FFMAs with two or three non-reused source registers in one bank)."""
    ffma = bad = 0
    for op, rest in loop:
        operands = _FFMA.search(rest) if op.startswith("FFMA") else None
        if operands is None:
            continue
        ffma += 1
        live = [int(re.search(r"\d+", r)[0]) for r in operands.groups() if ".reuse" not in r]
        banks = collections.Counter(r % 2 for r in live)
        bad += bool(banks) and max(banks.values()) >= 2
    return ffma, bad


def _registers(text: str) -> list[int]:
    return [int(r) for r in re.findall(r"\bR(\d+)\b", text)]


def load_distances(loop: list[tuple[str, str]]) -> tuple[list[int], list[int]]:
    """(for each shared-memory load, how many instructions later its result is first read, the loop taken as
    repeating; the index in the loop of each global load)."""
    shared, global_at = [], []
    for i, (op, rest) in enumerate(loop):
        if op.startswith("LDG") and not op.startswith(("LDGSTS", "LDGDEPBAR")):
            global_at.append(i)
            continue
        first = _registers(rest.split(",")[0]) if op.startswith("LDS") else []
        if not first:  # not a shared-memory load, or one into RZ
            continue
        width = 4 if ".128" in op else 2 if ".64" in op else 1
        dest = set(range(first[0], first[0] + width))
        for j in range(1, len(loop) + 1):
            op2, rest2 = loop[(i + j) % len(loop)]
            sources = rest2 if op2.startswith(("STS", "STG")) else rest2.partition(",")[2]
            if dest & set(_registers(sources)):
                shared.append(j)
                break
    return shared, global_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("points", nargs="+", help="TEMPLATE:JSON params")
    args = parser.parse_args()
    print(
        "| point | loop instructions | FFMA | FFMA share | bank conflicts | shared load to use, min / median "
        "| global loads at | most frequent others |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for point in args.points:
            loop = main_loop(sass_of(point, Path(tmp)))
            ffma, bad = conflicts(loop)
            others = collections.Counter(op.split(".")[0] for op, _ in loop if not op.startswith("FFMA"))
            common = ", ".join(f"{op} {n}" for op, n in others.most_common(5))
            share = f"{ffma / len(loop):.1%}" if loop else "n/a"
            shared, global_at = load_distances(loop)
            to_use = f"{min(shared)} / {statistics.median_low(shared)}" if shared else "n/a"
            where = ", ".join(map(str, global_at)) or "none"
            print(
                f"| `{point}` | {len(loop)} | {ffma} | {share} | {bad} ({bad / max(ffma, 1):.0%}) | {to_use} | {where} "
                f"| {common} |"
            )


if __name__ == "__main__":
    main()
