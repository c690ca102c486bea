"""The batch engine: one agent graph per problem, up to ``parallel`` at once, resumable, one table.

Each problem's search runs in a process of its own (``graphs.batch.runner``); this process loads the
problems, decides what each needs (nothing: its finished run is read back, or its finished row is taken
from an earlier slice's batch.json; a new run; the resumption of a killed one), starts the processes,
and rewrites the table whenever a problem is done.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, TypeVar

import structlog

from graphs.batch.metrics import by_group, summarise
from graphs.batch.problems import reason_for, row_names
from graphs.batch.rows import failed_row, family_of, pending_row, row_for, verified
from graphs.batch.runner import Assignment, read_record, run_is_busy, work
from graphs.batch.table import Render, Summarise, markdown, write_outputs, x
from graphs.config import RunConfig
from graphs.runs import RunPaths, _git_commit, create_run, load_state
from graphs.state import best_candidate
from sandbox.backends import job_memory_bytes
from tools import keys
from tools.errors import ConfigError, ProblemError
from tools.problem import Problem, check_fits, load_problem

log = structlog.get_logger(__name__)

# Settings that must match for a finished run to stand for this batch's run of the same problem.
COMPARED = (
    "device",
    "policy",
    "model",
    "base_url",
    "rounds",
    "ideas",
    "repair_attempts",
    "patience",
    "n_checks",
    "seed",
    "compile_reference",
    "roles",
    "timing",
    "ncu",
    "temperature",
    "max_tokens_per_call",
)
STOP_CHILDREN_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class BatchSettings:
    """How a batch runs, besides the runs' own settings (a RunConfig)."""

    runs_dir: Path
    out: Path
    command: str  # as the user typed it, for the table's header
    label: str = "batch"  # names OUT/<label>.json and .md, and starts every progress line
    parallel: int = 1
    budget_s: float | None = None  # start no new search after this many seconds
    fresh_check: bool = False  # re-check each selected kernel on fresh seeds and weights
    verbose: bool = False
    say: Callable[[str], None] | None = None  # progress lines (the CLI passes print); crosses processes
    render: Render = markdown
    summary: Summarise = summarise
    options: dict[str, Any] = field(default_factory=dict)  # what the command was given, for the record
    after: tuple[Path, ...] = ()  # earlier slices' batch.json files whose finished rows stand for this batch's


def _differing_settings(saved: dict[str, Any], config: RunConfig) -> list[str]:
    mine = json.loads(config.model_dump_json())
    return [k for k in COMPARED if saved.get(k) != mine.get(k)]


def _same_settings(saved: dict[str, Any], config: RunConfig) -> bool:
    return not _differing_settings(saved, config)


def earlier_rows(files: tuple[Path, ...], base: RunConfig, commit: str | None) -> dict[str, dict[str, Any]]:
    """The finished rows of earlier slices' batch.json files, by the hash of the problem's source: a call on a
    machine that has none of their run folders takes them instead of searching those problems again. A later
    file's row wins. A file made by other code or with other settings belongs to another table: naming it is
    a mistake to report, not a reason to search everything again."""
    rows: dict[str, dict[str, Any]] = {}
    for file in files:
        if not file.is_file():
            raise ConfigError(f"--after {file}: no such file")
        try:
            record = json.loads(file.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--after {file}: not a batch.json ({exc})") from exc
        if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
            raise ConfigError(f"--after {file}: not a batch.json (it holds no rows)")
        if record.get("commit") != commit:
            raise ConfigError(f"--after {file}: made by commit {record.get('commit')}, this tree is {commit}")
        differ = _differing_settings(record.get("run_config") or {}, base)
        if differ:
            raise ConfigError(f"--after {file}: made with other settings ({', '.join(differ)})")
        for row in record["rows"]:
            # Rows written before rows kept the source's hash cannot be matched: those problems run again.
            if row["status"] == "done" and row.get("sha256") and row.get("commit") == commit:
                rows[row["sha256"]] = {**row, "taken_from": str(file)}
    return rows


def find_run(root: Path, problem: Problem, config: RunConfig, commit: str | None) -> tuple[RunPaths, bool] | None:
    """The newest run of this exact problem source, with these settings and this commit of the code, and
    whether it finished. A run made by other code is not reused: one table must come from one tree."""
    matches = []
    for run_json in root.glob("*/run.json"):
        meta = json.loads(run_json.read_text())
        if (
            meta["problem"]["sha256"] == problem.info.sha256
            and meta.get("commit") == commit
            and _same_settings(meta["config"], config)
        ):
            matches.append((meta["created_at"], run_json.parent.name, RunPaths(run_json.parent)))
    if not matches:
        return None
    paths = max(matches)[2]
    # finalize writes report.md last, after the stop reason is saved: both mean the run is complete.
    finished = paths.report.exists() and bool(load_state(paths).get("stop_reason"))
    return paths, finished


@dataclass
class _Job:
    """A problem whose process is running (or about to)."""

    index: int
    name: str
    problem: Problem
    paths: RunPaths
    how: str  # new, resumed or reused (a finished run that only needs its re-check)
    assignment: Assignment
    process: BaseProcess | None = None


class Batch:
    def __init__(self, problems: list[Path], base: RunConfig, settings: BatchSettings) -> None:
        self.problems = problems
        self.names = row_names(problems)
        self.base = base
        self.s = settings
        self.commit = _git_commit()
        self.earlier = earlier_rows(settings.after, base, self.commit)
        self.rows: list[dict[str, Any]] = [pending_row(self.names[p], p) for p in problems]
        self.record: dict[str, Any] = {
            "date": dt.date.today().isoformat(),
            "commit": self.commit,
            "device": base.device,
            "model": base.model,
            "command": settings.command,
            "settings": settings.options,
            "run_config": json.loads(base.model_dump_json(exclude={"problem"})),
        }
        self.started = time.perf_counter()

    def say(self, text: str) -> None:
        if self.s.say is not None:
            self.s.say(f"{self.s.label}: {text}")

    def write(self) -> None:
        self.record.update(
            rows=self.rows,
            summary=self.s.summary(self.rows),
            groups=by_group(self.rows, self.s.summary),
            wall_s=time.perf_counter() - self.started,
        )
        write_outputs(self.s.out, self.s.label, self.record, self.s.render)

    # -------------------------------------------------------------------------------- one problem

    def prepare(self, index: int) -> dict[str, Any] | _Job:
        """The problem's row when nothing needs to run, else the job that runs it."""
        path, name = self.problems[index], self.names[self.problems[index]]
        may_search = self.s.budget_s is None or time.perf_counter() - self.started <= self.s.budget_s
        try:
            problem = load_problem(path)
        except ProblemError as exc:  # a fact about the file or this machine: its reason is the message
            log.info("problem_not_loadable", problem=name, exc_info=True)
            return failed_row(name, path, "skipped", reason_for(exc, self.base.device, path))
        try:
            memory = job_memory_bytes(self.base.sandbox, self.base.device)
            check_fits(problem.info, self.base.device, memory, self.base.n_checks)  # the estimate evaluate makes
        except ProblemError as exc:
            return failed_row(name, path, "skipped", reason_for(exc, self.base.device, path), problem)
        config = self.base.model_copy(update={"problem": str(path)})
        found = find_run(self.s.runs_dir, problem, config, self.commit)
        if found and found[1]:
            paths = found[0]
            best = best_candidate(load_state(paths))  # type: ignore[arg-type]
            unchecked = best is not None and "fresh_check" not in read_record(paths)
            if not (self.s.fresh_check and may_search and unchecked):
                return row_for(name, problem, paths, "reused", self.s.fresh_check)
            return self._job(index, name, problem, paths, "reused", config, resume=False, search=False)
        earlier = self.earlier.get(problem.info.sha256)
        # Whether a kernel counts as verified depends on whether this batch re-checks kernels on fresh seeds,
        # and the row carries no source to re-check: take it only where its verdict is this batch's too.
        if earlier is not None and verified(earlier, self.s.fresh_check) == earlier.get("verified"):
            return {**earlier, **pending_row(name, path, problem), "status": earlier["status"], "this_session": "taken"}
        if not may_search:
            return pending_row(name, path, problem)
        if found:  # killed part-way: continue it with the settings it was started with
            paths = found[0]
            if run_is_busy(paths):
                row = row_for(name, problem, paths, "busy", self.s.fresh_check)
                return {**row, "reason": "another process is working on this run now"}
            saved = RunConfig.model_validate(json.loads(paths.run_json.read_text())["config"])
            # The sandbox is where jobs run, not what the run measures: today's choice wins.
            saved = saved.model_copy(update={"sandbox": self.base.sandbox})
            return self._job(index, name, problem, paths, "resumed", saved, resume=True, search=True)
        paths = create_run(config, problem, self.s.runs_dir)
        return self._job(index, name, problem, paths, "new", config, resume=False, search=True)

    def _job(
        self,
        index: int,
        name: str,
        problem: Problem,
        paths: RunPaths,
        how: str,
        config: RunConfig,
        *,
        resume: bool,
        search: bool,
    ) -> _Job:
        assignment = Assignment(
            problem=str(problem.path),
            name=name,
            run_dir=str(paths.dir),
            config_json=config.model_dump_json(),
            resume=resume,
            search=search,
            fresh_check=self.s.fresh_check,
            verbose=self.s.verbose,
            say=self.s.say,
            keys=keys.held(),
        )
        return _Job(index, name, problem, paths, how, assignment)

    def finish(self, job: _Job) -> dict[str, Any]:
        """The row of a problem whose process has ended, however it ended."""
        assert job.process is not None
        job.process.join()
        code = job.process.exitcode
        row = row_for(job.name, job.problem, job.paths, job.how, self.s.fresh_check)
        if code is not None and code < 0 and row["status"] != "done":
            row.update(
                status="error", outcome="error", reason=f"its process was killed by {signal.Signals(-code).name}"
            )
        self.say(
            f"{job.name}: {row['status']} ({job.how}) · {row.get('outcome')} · best {row.get('best_id') or 'reference'}"
            f" · vs faster ref {x(row.get('speedup_vs_best'))}" + (f" · {row['reason']}" if row.get("reason") else "")
        )
        return row

    # ---------------------------------------------------------------------------------- the loop

    def run(self) -> dict[str, Any]:
        self.s.runs_dir.mkdir(parents=True, exist_ok=True)
        # Processes forked from a server that has imported torch and the graph once: a fresh interpreter
        # per problem would spend seconds on imports, and forking this process would copy its threads.
        # The fork server inherits this process's environment, and every problem's candidates could read
        # it there (/proc/<pid>/environ): the keys leave it first and go to each problem in memory.
        keys.take_from_environment()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["graphs.batch.runner"])
        queue = deque(range(len(self.problems)))
        running: dict[int, _Job] = {}  # by the process's sentinel, which `wait` returns
        self.write()
        try:
            while queue or running:
                while queue and len(running) < self.s.parallel:
                    index = queue.popleft()
                    outcome = self._guarded(index, lambda i=index: self.prepare(i))
                    if isinstance(outcome, _Job):
                        started = self._guarded(index, lambda j=outcome: self._start(j, context))
                        if isinstance(started, int):
                            running[started] = outcome
                            continue
                        outcome = started
                    self.rows[index] = outcome
                    if outcome.get("reason"):  # not started (skipped, unloadable, busy): say why
                        self.say(f"{outcome['name']}: {outcome['status']} · {outcome['reason']}")
                    self.write()
                for sentinel in wait(list(running)) if running else []:
                    job = running.pop(sentinel)
                    self.rows[job.index] = self._guarded(job.index, lambda j=job: self.finish(j))
                    self.write()
        finally:
            # Interrupted (Ctrl-C, or a bug here): stop the searches, and still leave a table that says
            # where each of them got to.
            self._stop(list(running.values()))
            for job in running.values():
                self.rows[job.index] = self._guarded(job.index, lambda j=job: self.finish(j))
            self.write()
        return self.record

    def _start(self, job: _Job, context: multiprocessing.context.BaseContext) -> int:
        """Start the problem's process; return its sentinel."""
        self.say(f"{job.name} ({family_of(job.problem)}): {job.how}")
        job.process = context.Process(target=work, args=(job.assignment,), name=f"kforge-batch-{job.name}")
        job.process.start()
        return job.process.sentinel

    def _guarded(self, index: int, step: Callable[[], T]) -> T | dict[str, Any]:
        """One broken problem must not cost the rest of a long batch: its failure becomes its row."""
        path = self.problems[index]
        try:
            return step()
        except Exception as exc:
            log.exception("batch_problem_error", problem=self.names[path])
            return failed_row(self.names[path], path, "error", reason_for(exc, self.base.device, path))

    def _stop(self, jobs: list[_Job]) -> None:
        """Interrupt the searches still running (as Ctrl-C would: each closes its sandbox and keeps its
        checkpoint, so the next batch resumes it), then wait for them."""
        for job in jobs:
            if job.process is not None and job.process.pid is not None and job.process.is_alive():
                os.kill(job.process.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_CHILDREN_S
        for job in jobs:
            if job.process is None:
                continue
            job.process.join(max(0.0, deadline - time.monotonic()))
            if job.process.is_alive():
                job.process.kill()
                job.process.join()


def run_batch(problems: list[Path], base: RunConfig, settings: BatchSettings) -> dict[str, Any]:
    """Search every problem (or read back its finished run); return the record written to OUT."""
    return Batch(problems, base, settings).run()
