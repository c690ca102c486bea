"""One problem of a batch, in a process of its own: search (or resume) it, then optionally re-check
its kernel on fresh seeds.

A process per problem, not a thread: each search configures logging into its own events.jsonl, and
the orchestrator's torch state (RNG seeds, device and dispatch modes of the metadata pass) is global.
What the process did is written to the run folder (``batch_record.json``), never returned in memory,
so a batch that is killed still finds it there. Concurrent problems share the host's devices through
the sandbox backend's turns (``sandbox.devices``): a timing job always has its device to itself.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from graphs.batch.problems import reason_for
from graphs.config import RunConfig
from graphs.launch import stream_run
from graphs.logs import configure_logging
from graphs.runs import RunPaths, load_state
from graphs.state import best_candidate
from sandbox.backends import job_memory_bytes, make_sandbox
from sandbox.evaluation import evaluate
from tools import keys
from tools.paths import flocked
from tools.problem import Problem, load_problem

log = structlog.get_logger(__name__)

RECORD = "batch_record.json"  # what a batch adds to a run folder: its wall time, errors, the re-check
LOCK = "batch.lock"  # held by the process working on a run, so that two batches never share one
# The re-check's seed. The worker derives input seeds as seed * 1_000_003 + i + 1 and builds the weights
# from the seed itself, so this gives inputs and weights that neither the coder (seed 0) nor the
# profiler (seed 1) of the run ever saw.
FRESH_SEED = 7919


def read_record(paths: RunPaths) -> dict[str, Any]:
    file = paths.dir / RECORD
    return json.loads(file.read_text()) if file.exists() else {}


def write_record(paths: RunPaths, record: dict[str, Any]) -> None:
    (paths.dir / RECORD).write_text(json.dumps(record, indent=1))


# ------------------------------------------------------------------------------------------- locks


def run_is_busy(paths: RunPaths) -> bool:
    """Is a live process (of this batch or another) working on this run now?"""
    with flocked(paths.dir / LOCK, blocking=False) as got:
        return not got


# ---------------------------------------------------------------------------------------- the work


@dataclass(frozen=True)
class Assignment:
    """What the process for one problem is asked to do; it crosses the process boundary, so it pickles."""

    problem: str
    name: str
    run_dir: str
    config_json: str
    resume: bool
    search: bool  # False: the run is finished and only its re-check is wanted
    fresh_check: bool
    verbose: bool
    say: Callable[[str], None] | None = None
    # The batch's provider keys (tools.keys): this process starts from a fork server that never had them
    # in its environment, so they come in memory, through the pipe that brings the assignment.
    keys: dict[str, str] = field(default_factory=dict, repr=False)


def _fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4f} ms"


def progress(name: str, say: Callable[[str], None] | None) -> Callable[[str, dict[str, Any]], None]:
    """One line per round: a batch runs many problems, so the per-node chatter of `kforge run` is too much."""

    def show(node: str, update: dict[str, Any]) -> None:
        if say is None:
            return
        if node == "baseline" and update.get("baseline"):
            b = update["baseline"]
            say(f"  [{name}] baseline: eager {_fmt_ms(b['eager_ms'])}, compile {_fmt_ms(b['compile_ms'])}")
        elif node == "critic":
            say(f"  [{name}] round done: best {update.get('best_id') or 'the reference'}")
        if update.get("stop_reason"):
            say(f"  [{name}] stop: {update['stop_reason']}")

    return show


def fresh_check(problem: Problem, source: str, config: RunConfig) -> dict[str, Any]:
    """Re-verify the selected kernel on fresh seeds and weights, as `kforge eval` would (no timing)."""
    sandbox = make_sandbox(config.sandbox)
    try:
        ev = evaluate(
            problem,
            source,
            sandbox=sandbox,
            device=config.device,
            available_bytes=job_memory_bytes(config.sandbox, config.device),
            candidate_name="best/model_new.py",
            policy=config.policy,
            references=("eager",),
            n_checks=config.n_checks,
            seed=FRESH_SEED,
            time_candidate=False,
            with_roofline=False,
        )
    finally:
        close = getattr(sandbox, "close", None)
        if close:
            close()
    c = ev.result.correctness
    return {
        "accepted": ev.accepted,
        "status": ev.status,
        "reason": ev.result.reason,
        "anti_cheat": ev.anti_cheat,
        "seed": FRESH_SEED,
        "passed": sum(k.passed for k in c.checks) if c else 0,
        "checks": len(c.checks) if c else 0,
        "input_seeds": [k.seed for k in c.checks] if c else [],
        "max_abs_error": c.worst("max_abs_error") if c else None,
        "wall_s": ev.result.wall_s,
    }


def _watch_parent() -> None:
    """End this process (as Ctrl-C would, so that its sandbox is closed) when the batch that started it
    is gone: an orphaned search would race a restarted batch that resumes the same run.

    The batch is watched through multiprocessing's parent sentinel, which ends when the batch's process
    does. Not through ``os.getppid()``: under the forkserver start method the parent is the fork server,
    which outlives a killed batch."""
    parent = multiprocessing.parent_process()
    if parent is None:
        raise RuntimeError("a batch search must run in a process the batch started")

    def watch() -> None:
        parent.join()
        log.warning("batch_parent_gone", pid=os.getpid())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True, name="kforge-batch-watch").start()


def work(a: Assignment) -> None:
    """The body of a problem's process. Any failure is written to the run's record (and its traceback
    logged) and ends the process with exit code 1; the batch reads the record to make the row. Stopped
    (SIGINT), it ends with exit code 130 and no traceback: its checkpoint is saved and the batch's table
    says where it got to."""
    # SIGINT is how the batch, and the watch on it, stop this search. A batch started as a script's
    # background job inherits SIGINT ignored and would pass that on: take the default back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    keys.adopt(a.keys)
    _watch_parent()
    try:
        _search_and_check(a)
    except KeyboardInterrupt:
        log.info("batch_search_stopped", problem=a.name)
        raise SystemExit(130) from None


def _search_and_check(a: Assignment) -> None:
    paths = RunPaths(Path(a.run_dir))
    configure_logging(a.verbose, paths.events)
    config = RunConfig.model_validate_json(a.config_json)
    with flocked(paths.dir / LOCK):
        record = read_record(paths)
        for key in ("error", "fresh_check_error"):
            record.pop(key, None)
        start = time.perf_counter()
        try:
            if a.search:
                stream_run(config, paths, resume=a.resume, on_update=progress(a.name, a.say))
        except Exception as exc:
            log.exception("batch_search_failed", problem=a.name)
            record["error"] = reason_for(exc, config.device, Path(a.problem))
        finally:
            # The search's wall time is what processes spent in it, summed over sessions (a resumed run
            # does not count the time it lay dead).
            if a.search:
                record["search_wall_s"] = record.get("search_wall_s", 0.0) + time.perf_counter() - start
                record["sessions"] = record.get("sessions", 0) + 1
            write_record(paths, record)
        best = best_candidate(load_state(paths))  # type: ignore[arg-type]
        if "error" not in record and a.fresh_check and best is not None and "fresh_check" not in record:
            try:
                record["fresh_check"] = fresh_check(load_problem(a.problem), best["source"], config)
            except Exception as exc:  # the check could not run (not: the kernel failed it); a later batch retries
                log.exception("batch_fresh_check_failed", problem=a.name)
                record["fresh_check_error"] = reason_for(exc, config.device, Path(a.problem))
            write_record(paths, record)
        configure_logging(a.verbose, None)
    if "error" in record or "fresh_check_error" in record:
        raise SystemExit(1)
