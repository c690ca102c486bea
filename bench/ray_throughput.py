"""Jobs per minute through the Ray backend with one and with two worker nodes (CPU jobs), side by side.

    python bench/ray_throughput.py [--jobs 12]

One run starts a Ray cluster on loopback (a head that places no job, worker nodes of one CPU each;
the same helper as tests/test_ray.py), then submits ``--jobs`` real CPU jobs at once, first with one
worker node, then again after a second has joined. A job: a hand-written reference candidate on its
CPU twin problem (softmax, LayerNorm, matmul in turn), 5 checks, eager reference, 10 timed trials.
For scale, the same jobs go one at a time through the local backend the Ray task runs inside (a new
interpreter per job). One warm-up job per configuration is not counted (compile cache, page cache).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.jobs import candidate_jobs  # noqa: E402
from sandbox.config import LocalSandboxConfig, RaySandboxConfig  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tests.ray_cluster import LocalRayCluster  # noqa: E402
from tools.protocol import EvalJob, JobResult, TimingConfig  # noqa: E402

PAIRS = [("softmax_small", "softmax_cpu"), ("layernorm_small", "layernorm_cpu"), ("matmul_small", "matmul_cpu")]


def make_jobs(n: int) -> list[EvalJob]:
    quick = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)
    return candidate_jobs(PAIRS, n, device="cpu", references=["eager"], timing=quick)


def measure(name: str, run: Callable[[list[EvalJob]], Iterator[JobResult]], n: int) -> tuple[str, int, float]:
    list(run(make_jobs(1)))  # warm-up, not counted
    started = time.perf_counter()
    results = list(run(make_jobs(n)))
    elapsed = time.perf_counter() - started
    bad = [f"{r.status}: {r.reason}" for r in results if r.status != "ok"]
    if bad or len(results) != n:
        raise SystemExit(f"{name}: {len(results)} results of {n}, not ok: {bad}")
    print(f"  {name}: {n} jobs in {elapsed:.1f} s = {60 * n / elapsed:.1f} jobs/min", flush=True)
    return name, n, elapsed


@contextlib.contextmanager
def cluster(workers: int) -> Iterator[LocalRayCluster]:
    import ray

    started = LocalRayCluster(workers)
    try:
        started.start()
        yield started
    finally:
        if ray.is_initialized():
            ray.shutdown()
        started.stop()
        shutil.rmtree(started.root, ignore_errors=True)  # Ray's session logs and the jobs' scratch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=12, help="jobs per configuration (default 12)")
    args = parser.parse_args()
    print(f"{args.jobs} CPU jobs per configuration on {os.cpu_count()} cores", flush=True)
    rows = []
    local = LocalSandbox(LocalSandboxConfig(prefork=False))
    rows.append(measure("local backend, new interpreter, one at a time", lambda jobs: map(local.run, jobs), args.jobs))
    with cluster(1) as ray_cluster:
        from sandbox.ray import RaySandbox

        sandbox = RaySandbox(RaySandboxConfig(address=ray_cluster.address))
        rows.append(measure("Ray, 1 worker node (1 CPU)", sandbox.run_many, args.jobs))
        ray_cluster.add_worker("worker1")
        rows.append(measure("Ray, 2 worker nodes (1 CPU each)", sandbox.run_many, args.jobs))
    print("\n| configuration | jobs | wall s | jobs/min |\n|---|---|---|---|")
    for name, n, elapsed in rows:
        print(f"| {name} | {n} | {elapsed:.1f} | {60 * n / elapsed:.1f} |")


if __name__ == "__main__":
    main()
