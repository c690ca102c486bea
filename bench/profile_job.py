"""Where one check job's time goes: the problem's own code as the candidate (so every check and probe runs), the
worker's job run in this process under cProfile, then its phases, its peak memory at each, and the functions that
took longest.

    python bench/profile_job.py ../shared/kernelbench/level1/21_Sigmoid.py --device cuda
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.worker import Phases, run_eval
from tools.problem import load_problem
from tools.protocol import EvalJob, TimingConfig

GIB = 1 << 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--top", type=int, default=30, help="functions listed, by cumulative time")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    job = EvalJob(
        problem_name=str(problem.path),
        problem_source=problem.source,
        candidate_name="reference_as_candidate.py",
        candidate_source=re.sub(r"\bModel\b", "ModelNew", problem.source),
        device=args.device,
        references=["eager"],
        timing=TimingConfig(min_trials=20, min_seconds=0.2, warmup_trials=2),
    )
    profile = cProfile.Profile()
    profile.enable()
    result = run_eval(job, Phases())
    profile.disable()
    print(f"{result.status}: {result.reason}")
    print("phases (s):", result.phases)
    if result.memory is not None:
        print("peak so far (GiB):", {k: round(v / GIB, 2) for k, v in result.memory.peak_by_phase.items()})
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
