"""Batch runs: one agent graph per problem over a folder or glob, concurrently and resumably, one table.

``run_batch`` is the engine behind ``kforge batch`` and ``bench/suite.py`` (a preset of it):
``problems`` finds the files and explains why one cannot run here, ``runner`` is the process that
searches one problem, ``rows`` reads a run back into a table row, ``metrics`` computes fast_p and the
geometric means, ``table`` writes the JSON and markdown, ``engine`` schedules the processes.
"""

from graphs.batch.engine import BatchSettings, find_run, run_batch
from graphs.batch.metrics import FAST_P, fast_p, geomean, summarise
from graphs.batch.problems import discover, reason_for
from graphs.batch.rows import NO_FAMILY, verified
from graphs.batch.table import markdown, merge, write_outputs

__all__ = [
    "FAST_P",
    "NO_FAMILY",
    "BatchSettings",
    "discover",
    "fast_p",
    "find_run",
    "geomean",
    "markdown",
    "merge",
    "reason_for",
    "run_batch",
    "summarise",
    "verified",
    "write_outputs",
]
