"""How often two contenders of the same speed get called "faster" on a busy machine: by the point estimate (the
rule before issue 39: a paired speedup above 1) and by the interval (``tools.speed``: the 95% interval above 1 and
the medians agreeing).

The same problem's reference against a second module computing the same op (identical work, so the truth is
1.0×), timed as the worker times them (``tools.timing.time_interleaved``, CPU timer, fresh inputs every trial,
cache flushed), ``--runs`` times, while ``--busy`` processes spin on the cores. A third column times a contender
doing half the work, to show that a real difference is still called faster.

    python bench/speed_flips.py problems/softmax_small.py --runs 10 --busy 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import speed
from tools.problem import load_problem
from tools.protocol import TimingConfig
from tools.timing import CpuTimer, refresher, time_interleaved


def _spin() -> None:
    while True:
        pass


def judge(contenders: dict, inputs: list, make, cfg: TimingConfig, seed: int) -> tuple[float, tuple, str, int]:
    timed = time_interleaved(contenders, inputs, refresher(make, inputs), CpuTimer(), cfg, seed=seed, keep="candidate")
    point = timed.paired["eager/candidate"]
    medians = timed.stats["eager"].median_ms / timed.stats["candidate"].median_ms
    interval = timed.intervals["eager/candidate"]
    return point, interval, speed.verdict(interval, medians) or "?", timed.trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=2, help="processes spinning on the cores meanwhile")
    args = parser.parse_args()

    problem = load_problem(args.problem)
    module = problem.module
    torch.manual_seed(0)
    reference = module.Model(*module.get_init_inputs()).eval()
    twin = module.Model(*module.get_init_inputs()).eval()  # the same op in another object: the same work
    inputs = list(module.get_inputs())

    def make(k: int) -> list:
        torch.manual_seed(k)
        return list(module.get_inputs())

    def lighter(*xs: torch.Tensor) -> torch.Tensor:  # the same op on half the rows: truly faster
        first = xs[0][: max(1, xs[0].shape[0] // 2)]
        return twin(first, *xs[1:])

    cfg = TimingConfig()  # the worker's defaults: 100 trials, 0.5 s
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    rows = []
    try:
        for run in range(args.runs):
            same = judge({"eager": reference, "candidate": twin}, inputs, make, cfg, run)
            real = judge({"eager": reference, "candidate": lighter}, inputs, make, cfg, run)
            rows.append((run, same, real))
    finally:
        for p in spinners:
            p.terminate()
    print(f"{problem.name}, {args.busy} busy processes, {args.runs} runs, TimingConfig defaults\n")
    print("| run | same work: paired × | 95% interval | trials | said | half the work: paired × | interval | said |")
    print("|---|---|---|---|---|---|---|---|")
    for run, (p, (lo, hi), said, n), (p2, (lo2, hi2), said2, _) in rows:
        print(f"| {run} | {p:.3f} | {lo:.3f}-{hi:.3f} | {n} | {said} | {p2:.3f} | {lo2:.3f}-{hi2:.3f} | {said2} |")
    before = sum(p > 1.0 for _, (p, *_), _ in rows)
    after = sum(said == "faster" for _, (_, _, said, _), _ in rows)
    real_after = sum(said == "faster" for *_, (_, _, said, _) in rows)
    print(
        f"\nsame work called faster: {before} of {args.runs} by the point estimate, {after} of {args.runs} by the "
        f"interval; half the work called faster by the interval: {real_after} of {args.runs}"
    )


if __name__ == "__main__":
    main()
