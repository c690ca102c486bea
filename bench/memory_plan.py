"""The memory plan against real jobs: per problem file, the pre-check's estimate, one eager forward's peak (from the
meta pass and as the worker measured it) and the peak of two real evaluation jobs.

The jobs: the problem's own code as ModelNew (correct by construction, so every check and probe runs; the anti-cheat
checks reject it at the end where it runs the reference's heavy ops), and the baseline (the reference timed alone),
whose timing phase holds the cache-flush buffer. Their larger peak is the evaluation's.

    python bench/memory_plan.py ../shared/kernelbench/level1 --device cuda --out runs/memory_plan.md
    python bench/memory_plan.py ../shared/kernelbench/level1/11_4D_tensor_matrix_multiplication.py --detail
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphs.batch import discover
from sandbox.config import LocalSandboxConfig
from sandbox.evaluation import Evaluation, evaluate
from sandbox.local import LocalSandbox
from tools.device import device_memory_bytes
from tools.errors import KernelforgeError
from tools.problem import load_problem, working_set_bytes
from tools.protocol import TimingConfig

GIB = 1 << 30


def _detail(label: str, ev: Evaluation) -> str:
    """One job's memory and phases, for finding where a peak beyond the plan comes from."""
    m = ev.result.memory
    memory = (
        f"peak {m.peak_bytes / GIB:.3f} GiB, eager {m.eager_peak_bytes / GIB:.3f}, plan {m.plan_bytes / GIB:.3f}, "
        + "by phase "
        + ", ".join(f"{k} {v / GIB:.3f}" for k, v in m.peak_by_phase.items())
        if m
        else ""
    )
    return f"  {label}: {ev.result.status} {memory} phases {ev.result.phases}"


def measure(path: Path, device: str, sandbox: LocalSandbox, available: int, detail: bool = False) -> str:
    problem = load_problem(path)
    info = problem.info
    timing = TimingConfig(min_trials=20, min_seconds=0.2, warmup_trials=2)
    common = {"sandbox": sandbox, "device": device, "available_bytes": available, "with_roofline": False}
    start = time.perf_counter()
    # The problem's own code: the static checks would reject it before any job, and the job is what is measured.
    source = re.sub(r"\bModel\b", "ModelNew", problem.source)
    checked = evaluate(problem, source, timing=timing, static_precheck=False, **common)
    check_s = time.perf_counter() - start
    timed = evaluate(problem, None, timing=timing, **common)
    if detail:  # the baseline again with eager alone: what the compiled reference's calls add
        eager_only = evaluate(problem, None, timing=timing, references=("eager",), **common)
        jobs = (("check", checked), ("baseline", timed), ("baseline, eager only", eager_only))
        print("\n".join(_detail(label, ev) for label, ev in jobs), file=sys.stderr, flush=True)
    reports = [r.result.memory for r in (checked, timed) if r.result.memory is not None]
    if len(reports) < 2:
        return f"| {info.name} | {checked.result.status}: {checked.result.reason[:80]} | | | | | | |"
    peak = max(r.peak_bytes for r in reports)
    eager = reports[0].eager_peak_bytes
    float64 = "float64 reference unavailable" not in checked.result.details
    estimate = working_set_bytes(info, 5, device)
    ran = working_set_bytes(info, 5, device, float64)
    return (
        f"| {path.parent.name}/{info.name} | {info.eager_peak_bytes / GIB:.2f} | {eager / GIB:.2f} | {peak / GIB:.2f} "
        f"| {peak / eager:.2f} | {estimate / GIB:.2f} | {ran / peak:.2f}{'' if float64 else ' (no float64)'} "
        f"| {check_s:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+", help="problem files, folders or globs")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--only", default="", help="comma-separated name patterns or substrings to keep")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--detail", action="store_true", help="print each job's peak and phases, and a baseline of eager alone"
    )
    args = parser.parse_args()
    sandbox = LocalSandbox(LocalSandboxConfig())
    available = device_memory_bytes(args.device)
    lines = [
        "| problem | eager peak, meta GiB | eager peak, measured GiB | job peak GiB | peak / eager | estimate GiB "
        "| estimate / peak | check job s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for path in discover(args.problems, [o for o in args.only.split(",") if o]):
        try:
            line = measure(path, args.device, sandbox, available, args.detail)
        except KernelforgeError as exc:  # too large, not loadable: its one-line reason is the row
            line = f"| {path.parent.name}/{path.stem} | {str(exc).splitlines()[0][-120:]} | | | | | | |"
        print(line, flush=True)
        lines.append(line)
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 5 and cells[5]:
            ratios.append(float(cells[5]))
    if ratios:
        lines.append(
            f"\npeak / eager over {len(ratios)} files: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}"
        )
        print(lines[-1])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
