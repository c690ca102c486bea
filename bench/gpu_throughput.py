"""Jobs per minute through the local backend on the GPUs of this host, one caller and several at once.

    python bench/gpu_throughput.py [--jobs 12] [--callers 4] [--gpus 0,1]

The jobs are what an agent graph sends: the coder's correctness checks (5 seeded input sets, no timing)
and the evaluator's full job (the same checks, then the candidate timed interleaved with eager, L2 flushed
before every call, 100 trials / 0.5 s at least). Candidates: the hand-written CUDA softmax and LayerNorm on
the research problems, in turn. Each configuration runs ``--jobs`` jobs, first from one caller, then from
``--callers`` threads each with a sandbox of its own (as ``kforge batch`` runs one graph per process): the
GPU pool lets checks share a GPU and gives a timing job its GPU alone. One warm-up job per sandbox is
not counted (nor is the start of its fork server). Prints a Markdown table; every job must come back ``ok``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.jobs import candidate_jobs  # noqa: E402
from sandbox.config import LocalSandboxConfig  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tools.protocol import EvalJob  # noqa: E402

PAIRS = [("softmax_4096x65536", "softmax_cuda"), ("layernorm_16x64x256x256", "layernorm_cuda")]


def make_jobs(n: int, timed: bool) -> list[EvalJob]:
    return candidate_jobs(PAIRS, n, device="cuda", references=["eager"], time_candidate=timed)


def measure(timed: bool, callers: int, n: int, gpus: list[str] | None) -> tuple[str, int, int, float, set[str]]:
    sandboxes = [LocalSandbox(LocalSandboxConfig(gpus=gpus)) for _ in range(callers)]
    try:
        with ThreadPoolExecutor(callers) as pool:
            # Warm-up, one job per sandbox, not counted: its fork server, the page and compile caches.
            list(pool.map(lambda sandbox: sandbox.run(make_jobs(1, timed)[0]), sandboxes))
            jobs = make_jobs(n, timed)
            started = time.perf_counter()
            results = list(pool.map(lambda k: sandboxes[k % callers].run(jobs[k]), range(n)))
            elapsed = time.perf_counter() - started
    finally:
        for sandbox in sandboxes:
            sandbox.close()
    bad = [f"{r.status}: {r.reason}" for r in results if r.status != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} of {n} jobs not ok: {bad[:3]}")
    used = {r.environment.get("gpu_index", "?") for r in results}
    kind = "checks + timing" if timed else "checks only"
    print(f"  {kind}, {callers} caller(s): {n} jobs in {elapsed:.1f} s on GPU(s) {sorted(used)}", flush=True)
    return kind, callers, n, elapsed, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=12, help="jobs per configuration (default 12)")
    parser.add_argument("--callers", type=int, default=4, help="callers at once in the second configuration")
    parser.add_argument("--gpus", help="the pool, as for kforge --gpus (default: every visible GPU)")
    args = parser.parse_args()
    gpus = args.gpus.split(",") if args.gpus else None
    rows = [measure(timed, callers, args.jobs, gpus) for timed in (False, True) for callers in (1, args.callers)]
    print("\n| jobs | callers at once | jobs run | wall s | jobs/min | GPUs used |\n|---|---|---|---|---|---|")
    for kind, callers, n, elapsed, used in rows:
        print(f"| {kind} | {callers} | {n} | {elapsed:.1f} | {60 * n / elapsed:.1f} | {', '.join(sorted(used))} |")


if __name__ == "__main__":
    main()
