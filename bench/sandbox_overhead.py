"""Per-job wall time of each sandbox backend on the same small CPU job, side by side.

    python bench/sandbox_overhead.py [--jobs 10]

The job: the hand-written softmax candidate on problems/softmax_small.py, 5 checks, eager reference
only, 10 timed trials. Each backend runs one warm-up job (the fork server, the container) and then
``--jobs`` jobs in turn; the medians are compared as a ratio against the local backend's default.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox.backends import make_sandbox  # noqa: E402
from sandbox.config import DockerSandboxConfig, LocalSandboxConfig  # noqa: E402
from tools.protocol import EvalJob, TimingConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    job = dict(
        problem_name="softmax_small.py",
        problem_source=(ROOT / "problems" / "softmax_small.py").read_text(),
        candidate_name="softmax_cpu.py",
        candidate_source=(ROOT / "problems" / "candidates" / "softmax_cpu.py").read_text(),
        device="cpu",
        references=["eager"],
        timing=TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2),
    )
    backends = {
        "local (fork server)": LocalSandboxConfig(prefork=True),
        "local (new interpreter)": LocalSandboxConfig(prefork=False),
        "docker": DockerSandboxConfig(),
    }
    sandboxes = {name: make_sandbox(config) for name, config in backends.items()}
    walls: dict[str, list[float]] = {name: [] for name in backends}
    for sandbox in sandboxes.values():
        assert sandbox.run(EvalJob(**job)).status == "ok"  # warm-up: fork server, container
    for _ in range(args.jobs):
        for name, sandbox in sandboxes.items():  # interleaved, so drift hits every backend alike
            started = time.perf_counter()
            result = sandbox.run(EvalJob(**job))
            walls[name].append(time.perf_counter() - started)
            assert result.status == "ok", result.reason
    base = statistics.median(walls["local (fork server)"])
    print(f"| backend | median s per job | min s | vs local (fork server) |  ({args.jobs} jobs each)")
    print("|---|---|---|---|")
    for name, w in walls.items():
        print(f"| {name} | {statistics.median(w):.2f} | {min(w):.2f} | {statistics.median(w) / base:.2f}× |")


if __name__ == "__main__":
    main()
