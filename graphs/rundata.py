"""One run, read back into typed records: the single source for ``kforge trace`` and the HTML report.

A run folder holds the same facts in several places (the checkpointed state, ``events.jsonl``,
``candidates/<id>/``, ``run.json``). Everything that shows a run reads it through ``load_run`` so the
text trace and the report can never disagree about a number.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from graphs.runs import RunPaths, load_state, open_run
from tools import speed

log = structlog.get_logger(__name__)


def precision_text(reduced: Sequence[str] | None) -> str:
    """How a candidate's arithmetic reads in a report. ``reduced`` is ``Evaluation.reduced_precision``: the
    findings of computing below the problem's precision that the relaxed policy let through (None: a run
    saved before they were recorded)."""
    if reduced is None:
        return "not recorded"
    if not reduced:
        return "the problem's own (no reduced-precision finding)"
    return "reduced, which the relaxed policy allows within its tolerance: " + "; ".join(reduced)


def reduced_details(reduced: Sequence[str]) -> str:
    """The findings without their trick name and line, each said once: for a table's footnote."""
    return "; ".join(dict.fromkeys(r.split(": ", 1)[-1] for r in reduced))


@dataclass(frozen=True)
class Reference:
    """The baseline: the reference timed eagerly and under torch.compile, and the roofline floor."""

    eager_ms: float | None
    compile_ms: float | None
    floor_ms: float | None
    bound: str | None
    best_reference: str | None
    environment: dict[str, str]
    ceilings: dict[str, Any] | None
    warnings: tuple[str, ...]

    @property
    def best_ms(self) -> float | None:
        times = [t for t in (self.eager_ms, self.compile_ms) if t is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class Job:
    """One sandbox job, paired from its ``evaluate_start`` and ``evaluate_done`` / ``job_done`` events."""

    job_id: str
    candidate_id: str | None  # None: the reference alone (the baseline)
    started_at: str
    status: str | None  # None: the job never reported back (the run was killed)
    wall_s: float | None
    speedups: dict[str, float | None]


@dataclass(frozen=True)
class Message:
    role: str
    kind: str
    content: str
    candidate_id: str | None
    round: int


@dataclass(frozen=True)
class RoleUsage:
    """What one role spent: LLM calls and tokens, dollars, sandbox jobs and their seconds, wall time."""

    role: str
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    llm_s: float = 0.0
    tool_calls: int = 0
    jobs: int = 0
    job_s: float = 0.0  # sandbox job seconds: GPU seconds on a CUDA run, CPU seconds on the CPU target
    wall_s: float = 0.0  # time inside the role's nodes, from node_start / node_end events


@dataclass(frozen=True)
class CandidateRecord:
    id: str
    round: int
    parent_id: str | None
    idea: str
    status: str
    reason: str
    verdict: str | None
    critic_reason: str | None
    attempts: int
    source: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    speedup_vs_best: float | None
    pct_roofline: float | None
    diagnosis: str | None
    timing: dict[str, float]
    correctness: dict[str, Any] | None
    params: dict[str, Any]
    compile_log: str  # candidates/<id>/compile.log
    evaluation: dict[str, Any] | None  # candidates/<id>/result.json: the coder's last check
    profile: dict[str, Any]  # candidates/<id>/profile*.json (Nsight Compute metrics and the like)
    jobs: tuple[Job, ...] = ()
    reduced_precision: tuple[str, ...] | None = None  # Evaluation.reduced_precision; None: not recorded
    speedup_interval: tuple[float, float] | None = None  # 95% interval of speedup_vs_best; None: not recorded
    speed: str | None = None  # faster, slower, not distinguishable (tools.speed.verdict); None: not recorded

    @property
    def speedup_text(self) -> str:
        """``1.477× (95%: 1.452-1.501, faster)``, or the bare figure for a run saved before intervals."""
        return speed.describe(self.speedup_vs_best, self.speedup_interval, self.speed)  # type: ignore[arg-type]

    def worst(self, key: str) -> float | None:
        """The largest value of a per-check error (e.g. ``max_abs_error``) over the correctness checks."""
        checks = (self.correctness or {}).get("checks") or []
        values = [c[key] for c in checks if c.get(key) is not None]
        return max(values) if values else None

    @property
    def tolerance(self) -> str:
        c = self.correctness
        if not c:
            return "not checked"
        return f"{c.get('policy', '?')}: atol={c.get('atol', '?'):g} rtol={c.get('rtol', '?'):g}"

    @property
    def precision(self) -> str:
        return precision_text(self.reduced_precision)

    @property
    def phases(self) -> dict[str, float]:
        return dict(((self.evaluation or {}).get("result") or {}).get("phases") or {})


@dataclass(frozen=True)
class RoundSummary:
    round: int
    fastest_id: str | None  # the round's fastest timed candidate, accepted or not
    fastest_speedup: float | None
    result_so_far: float  # the run's result after this round: the best accepted speedup, at least the reference's 1


@dataclass(frozen=True)
class RunData:
    run_id: str
    dir: Path
    meta: dict[str, Any]  # run.json as written
    state: dict[str, Any]  # the latest checkpointed state, as LangGraph saved it
    reference: Reference | None
    candidates: tuple[CandidateRecord, ...]
    messages: tuple[Message, ...]
    usage: tuple[RoleUsage, ...]
    events: tuple[dict[str, Any], ...]
    problem_source: str | None  # None: the problem file is gone or changed since the run
    best_id: str | None = None
    stop_reason: str | None = None
    round: int = 0
    feedback: tuple[str, ...] = field(default_factory=tuple)

    @property
    def problem(self) -> dict[str, str]:
        return dict(self.meta.get("problem") or {})

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.meta.get("config") or {})

    @property
    def best(self) -> CandidateRecord | None:
        return self.candidate(self.best_id) if self.best_id else None

    def candidate(self, cid: str) -> CandidateRecord | None:
        return next((c for c in self.candidates if c.id == cid), None)

    def children(self) -> dict[str | None, list[CandidateRecord]]:
        """Candidates by the candidate they branched from; None: from the reference."""
        ids = {c.id for c in self.candidates}
        out: dict[str | None, list[CandidateRecord]] = {}
        for c in self.candidates:
            out.setdefault(c.parent_id if c.parent_id in ids else None, []).append(c)
        return out

    def parent_source(self, c: CandidateRecord) -> tuple[str, str | None]:
        """What a candidate changed from: its parent's source, or for a root candidate the problem file."""
        parent = self.candidate(c.parent_id) if c.parent_id else None
        if parent is not None:
            return parent.id, parent.source
        return "reference (" + self.problem.get("name", "problem") + ")", self.problem_source

    def rounds(self) -> list[RoundSummary]:
        last = max([self.round, *(c.round for c in self.candidates)], default=0)
        out: list[RoundSummary] = []
        result = 1.0  # the reference is always the fallback, as the critic's choice of best_id has it
        for r in range(1, last + 1):
            mine = [c for c in self.candidates if c.round == r and c.speedup_vs_best is not None]
            fastest = max(mine, key=lambda c: c.speedup_vs_best or 0.0, default=None)
            accepted = [c.speedup_vs_best or 0.0 for c in mine if c.verdict == "accepted"]
            result = max([result, *accepted])
            out.append(
                RoundSummary(r, fastest.id if fastest else None, fastest.speedup_vs_best if fastest else None, result)
            )
        return out

    def total_usage(self) -> RoleUsage:
        sums = {k: sum(getattr(u, k) for u in self.usage) for k in RoleUsage.__dataclass_fields__ if k != "role"}
        return RoleUsage(role="total", **sums)

    def environment(self) -> dict[str, str]:
        """Device, driver, versions and commit, from the baseline job and run.json."""
        env: dict[str, str] = {}
        if self.reference:
            env.update({k: str(v) for k, v in self.reference.environment.items()})
        gpus = self.meta.get("gpus")
        if gpus:
            env["gpus (nvidia-smi)"] = "; ".join(gpus)
        for pkg, ver in (self.meta.get("versions") or {}).items():
            env.setdefault(pkg, str(ver))
        env["commit"] = str(self.meta.get("commit") or "unknown")
        env["orchestrator host"] = str(self.meta.get("host") or "unknown")
        return env


def load_run(ref: str, root: Path) -> RunData:
    """A run by id (under root) or by folder; a bad reference is a ConfigError with one line."""
    paths, _, _ = open_run(ref, root)
    return load_paths(paths)


def load_paths(paths: RunPaths) -> RunData:
    meta = json.loads(paths.run_json.read_text())
    state = load_state(paths)
    events = tuple(read_events(paths.events))
    jobs = _jobs(events)
    baseline = state.get("baseline")
    return RunData(
        run_id=paths.run_id,
        dir=paths.dir,
        meta=meta,
        state=state,
        reference=_reference(baseline) if baseline else None,
        candidates=tuple(_candidate(c, paths, jobs) for c in state.get("candidates", [])),
        messages=tuple(
            Message(m["role"], m["kind"], str(m["content"]), m.get("candidate_id"), m.get("round", 0))
            for m in state.get("messages", [])
        ),
        usage=_usage(state.get("usage", {}), events),
        events=events,
        problem_source=_problem_source(meta.get("problem") or {}),
        best_id=state.get("best_id"),
        stop_reason=state.get("stop_reason"),
        round=state.get("round", 0),
        feedback=tuple(state.get("feedback", [])),
    )


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            # a run killed mid-write leaves a torn last line; the rest of the log is still good
            log.warning("events_line_unreadable", path=str(path), line=n)
    return out


def _problem_source(problem: dict[str, str]) -> str | None:
    path = Path(problem.get("path", ""))
    if not path.is_file():
        return None
    source = path.read_text()
    # an edited problem file would diff root candidates against code the run never saw
    return source if hashlib.sha256(source.encode()).hexdigest() == problem.get("sha256") else None


def _reference(b: dict[str, Any]) -> Reference:
    return Reference(
        eager_ms=b.get("eager_ms"),
        compile_ms=b.get("compile_ms"),
        floor_ms=b.get("floor_ms"),
        bound=b.get("bound"),
        best_reference=b.get("best_reference"),
        environment=dict(b.get("device") or {}),
        ceilings=b.get("ceilings"),
        warnings=tuple(b.get("warnings") or ()),
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _candidate(c: dict[str, Any], paths: RunPaths, jobs: dict[str | None, list[Job]]) -> CandidateRecord:
    folder = paths.candidates / c["id"]
    log_path = folder / "compile.log"
    profile = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("profile*.json"))}
    reduced = c.get("reduced_precision")  # absent from runs saved before it was recorded
    return CandidateRecord(
        id=c["id"],
        round=c.get("round", 0),
        parent_id=c.get("parent_id"),
        idea=c.get("idea", ""),
        status=c.get("status") or "unknown",
        reason=c.get("reason") or "",
        verdict=c.get("verdict"),
        critic_reason=c.get("critic_reason"),
        attempts=c.get("attempts", 0),
        source=c.get("source", ""),
        speedup_vs_eager=c.get("speedup_vs_eager"),
        speedup_vs_compile=c.get("speedup_vs_compile"),
        speedup_vs_best=c.get("speedup_vs_best"),
        pct_roofline=c.get("pct_roofline"),
        diagnosis=c.get("diagnosis"),
        timing=dict(c.get("timing") or {}),
        correctness=c.get("correctness"),
        params={k: c[k] for k in ("template", "params") if c.get(k) is not None},
        compile_log=log_path.read_text() if log_path.is_file() else "",
        evaluation=_read_json(folder / "result.json"),
        profile=profile,
        jobs=tuple(jobs.get(c["id"], [])),
        reduced_precision=None if reduced is None else tuple(reduced),
        speedup_interval=tuple(c["speedup_interval"]) if c.get("speedup_interval") else None,
        speed=c.get("speed"),
    )


def _jobs(events: tuple[dict[str, Any], ...]) -> dict[str | None, list[Job]]:
    """Sandbox jobs by candidate id, in the order they started."""
    started: dict[str, dict[str, Any]] = {}
    done: dict[str, dict[str, Any]] = {}
    for e in events:
        if "job_id" not in e:
            continue
        if e.get("event") == "evaluate_start":
            started[e["job_id"]] = e
        elif e.get("event") in ("evaluate_done", "job_done"):
            done.setdefault(e["job_id"], {}).update(e)
    out: dict[str | None, list[Job]] = {}
    for job_id, start in started.items():
        end = done.get(job_id, {})
        name = str(start.get("candidate") or "")
        # the baseline's job is named after the harness's placeholder file, a candidate's after its id
        cid = name.removesuffix(".py") if name and name != "candidate.py" else None
        out.setdefault(cid, []).append(
            Job(
                job_id=job_id,
                candidate_id=cid,
                started_at=str(start.get("timestamp", "")),
                status=end.get("status"),
                wall_s=end.get("wall_s"),
                speedups=dict(end.get("speedups") or {}),
            )
        )
    return out


def _timestamp(e: dict[str, Any]) -> dt.datetime | None:
    stamp = e.get("timestamp")
    return dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None


def role_wall_seconds(events: tuple[dict[str, Any], ...]) -> dict[str, float]:
    """Seconds spent inside each role's nodes; fan-out branches (one per idea) are paired separately."""
    open_spans: dict[tuple[str, Any], dt.datetime] = {}
    out: dict[str, float] = {}
    for e in events:
        role, stamp = e.get("role"), _timestamp(e)
        if role is None or stamp is None:
            continue
        key = (role, e.get("idea_id"))
        if e.get("event") == "node_start":
            open_spans[key] = stamp  # a resumed run restarts an unfinished node: the later start counts
        elif e.get("event") == "node_end" and key in open_spans:
            out[role] = out.get(role, 0.0) + (stamp - open_spans.pop(key)).total_seconds()
    return out


def _usage(usage: dict[str, dict[str, float]], events: tuple[dict[str, Any], ...]) -> tuple[RoleUsage, ...]:
    wall = role_wall_seconds(events)
    roles = list(dict.fromkeys([*wall, *usage]))  # events give the graph's order
    out = []
    for role in roles:
        u = usage.get(role, {})
        out.append(
            RoleUsage(
                role=role,
                llm_calls=int(u.get("llm_calls", 0)),
                input_tokens=int(u.get("input_tokens", 0)),
                output_tokens=int(u.get("output_tokens", 0)),
                dollars=float(u.get("dollars", 0.0)),
                llm_s=float(u.get("seconds", 0.0)),
                tool_calls=int(u.get("tool_calls", 0)),
                jobs=int(u.get("jobs", 0)),
                job_s=float(u.get("job_s", 0.0)),
                wall_s=wall.get(role, 0.0),
            )
        )
    return tuple(out)
