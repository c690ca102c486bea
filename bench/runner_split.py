"""The runner against the candidate in the worker: the same job both ways, interleaved, on the local backend.

Per way: the job's median wall time, and the candidate's timed median over eager's (the paired speedup), so a
difference in what the split measures shows beside what it costs.

    python bench/runner_split.py --jobs 5 [--candidate problems/candidates/softmax_cpu.py]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.local import LocalSandbox
from tools.protocol import EvalJob, TimingConfig

ROOT = Path(__file__).resolve().parents[1]


def job(problem: Path, candidate: Path, split: bool, device: str) -> EvalJob:
    return EvalJob(
        problem_name=problem.name,
        problem_source=problem.read_text(),
        candidate_name=candidate.name,
        candidate_source=candidate.read_text(),
        device=device,  # type: ignore[arg-type]
        references=["eager"],
        n_checks=2,
        timing=TimingConfig(min_trials=100, min_seconds=0.5),
        separate_candidate=split,
        timeout_s=300,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5, help="jobs each way")
    parser.add_argument("--problem", type=Path, default=ROOT / "problems" / "softmax_small.py")
    parser.add_argument("--candidate", type=Path, default=ROOT / "problems" / "candidates" / "softmax_cpu.py")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    sandbox = LocalSandbox()
    walls: dict[bool, list[float]] = {True: [], False: []}
    speedups: dict[bool, list[float]] = {True: [], False: []}
    sandbox.run(job(args.problem, args.candidate, False, args.device))  # the fork server starts outside
    for _ in range(args.jobs):
        for split in (True, False):
            start = time.perf_counter()
            result = sandbox.run(job(args.problem, args.candidate, split, args.device))
            walls[split].append(time.perf_counter() - start)
            if result.status != "ok" or result.timing is None:
                raise SystemExit(f"split={split}: {result.status}: {result.reason}")
            speedups[split].append(result.timing.paired["eager/candidate"])
            stats = result.timing.stats
            print(
                f"split={split!s:5} wall {walls[split][-1]:.2f} s · candidate {stats['candidate'].median_ms:.4f} ms"
                f" · eager {stats['eager'].median_ms:.4f} ms · {result.environment.get('candidate_process')}",
                file=sys.stderr,
            )
    print("| candidate runs in | job wall s (median) | speedup vs eager (median of jobs) | speedups |")
    print("|---|---|---|---|")
    for split in (True, False):
        where = "the runner" if split else "the worker"
        each = ", ".join(f"{s:.3f}" for s in speedups[split])
        wall, speedup = statistics.median(walls[split]), statistics.median(speedups[split])
        print(f"| {where} | {wall:.2f} | {speedup:.3f}× | {each} |")
    sandbox.close()


if __name__ == "__main__":
    main()
