"""What the local backend's containment (sandbox.contain) costs a job: the same small check job, contained and not,
interleaved, in both ways the backend starts a worker; the median wall time of each and their difference.

    python bench/containment_cost.py --jobs 15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.config import LocalSandboxConfig
from sandbox.local import LocalSandbox
from tools.protocol import EvalJob, TimingConfig

ROOT = Path(__file__).resolve().parents[1]


def job(device: str) -> EvalJob:
    problem = ROOT / "problems" / "softmax_small.py"
    return EvalJob(
        problem_name=problem.name,
        problem_source=problem.read_text(),
        candidate_name="softmax_cpu.py",
        candidate_source=(ROOT / "problems" / "candidates" / "softmax_cpu.py").read_text(),
        device=device,  # type: ignore[arg-type]
        references=["eager"],
        timing=TimingConfig(min_trials=3, min_seconds=0.0, warmup_trials=1),
        time_candidate=False,
        timeout_s=120,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=15, help="jobs per configuration")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    configs = {
        (prefork, contained): LocalSandbox(
            LocalSandboxConfig(prefork=prefork, contain=contained, contain_cuda=contained)
        )
        for prefork in (True, False)
        for contained in (True, False)
    }
    walls: dict[tuple[bool, bool], list[float]] = {key: [] for key in configs}
    for sandbox in configs.values():  # the fork servers start outside the measurement
        sandbox.run(job(args.device))
    for _ in range(args.jobs):
        for key, sandbox in configs.items():
            start = time.perf_counter()
            result = sandbox.run(job(args.device))
            walls[key].append(time.perf_counter() - start)
            if result.status not in ("ok", "rejected"):
                raise SystemExit(f"{key}: {result.status}: {result.reason}")
    print("| start | contained ms | not contained ms | cost ms |")
    print("|---|---|---|---|")
    for prefork in (True, False):
        on, off = (statistics.median(walls[(prefork, c)]) * 1e3 for c in (True, False))
        print(f"| {'fork server' if prefork else 'new interpreter'} | {on:.0f} | {off:.0f} | {on - off:+.0f} |")
    for sandbox in configs.values():
        sandbox.close()


if __name__ == "__main__":
    main()
