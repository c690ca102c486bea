"""Jobs the throughput benchmarks send: a hand-written candidate on its problem, both from ``problems/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.protocol import EvalJob

ROOT = Path(__file__).resolve().parents[1]


def candidate_jobs(pairs: list[tuple[str, str]], n: int, **fields: Any) -> list[EvalJob]:
    """``n`` jobs cycling through (problem, candidate) stems; ``fields`` set the rest of each ``EvalJob``."""
    jobs = []
    for i in range(n):
        problem, candidate = pairs[i % len(pairs)]
        jobs.append(
            EvalJob(
                problem_name=f"{problem}.py",
                problem_source=(ROOT / "problems" / f"{problem}.py").read_text(),
                candidate_name=f"{candidate}.py",
                candidate_source=(ROOT / "problems" / "candidates" / f"{candidate}.py").read_text(),
                **fields,
            )
        )
    return jobs
