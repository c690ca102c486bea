"""A batch's rows: what the table says about one problem, read back from its run folder.

Statuses: ``pending`` (not run yet), ``done``, ``unfinished`` (the run stopped part-way), ``error``
(the search raised), ``skipped`` (the file cannot be loaded, or cannot run on this device), ``reference
failed`` (the problem's own model failed in the sandbox). Every status but the first two carries a
one-line ``reason``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import builtin
from agents.builtin.catalog import TEMPLATES
from graphs.batch.problems import explain
from graphs.batch.runner import read_record
from graphs.runs import PROJECT_ROOT, RunPaths, load_state
from graphs.state import best_candidate
from tools.problem import Problem, working_set_bytes

NO_FAMILY = "no builtin idea applies"
FAILED = ("unfinished", "error", "skipped", "reference failed")
NO_GROUP = "—"  # a row of an older batch.json that names no file to take its folder from


def family_of(problem: Problem) -> str:
    """The builtin family the planner will see (the same call it makes), or NO_FAMILY."""
    return builtin.recognise(problem.info) or NO_FAMILY


def where(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path)


def group_of(row: dict[str, Any]) -> str:
    """The row's group: the problem file's folder (KernelBench's ``level1``...). Rows of batch.json files
    written before rows carried it fall back to their path."""
    if row.get("group"):
        return str(row["group"])
    if row.get("path"):
        return Path(row["path"]).parent.name or NO_GROUP
    return NO_GROUP


def pending_row(name: str, path: Path, problem: Problem | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "path": where(path),
        "group": path.parent.name or NO_GROUP,
        "status": "pending",
    }
    if problem is not None:
        row.update(
            # What a later call's --after matches a finished row by, with the record's commit and settings.
            sha256=problem.info.sha256,
            family=family_of(problem),
            input_bytes=problem.info.input_bytes,
            output_bytes=problem.info.output_bytes,
            flops=problem.info.flops,
        )
    return row


def failed_row(name: str, path: Path, status: str, reason: str, problem: Problem | None = None) -> dict[str, Any]:
    return {**pending_row(name, path, problem), "status": status, "reason": reason, "outcome": status}


def _checks(best: dict[str, Any]) -> dict[str, Any]:
    checks = (best.get("correctness") or {}).get("checks", [])
    return {
        "passed": sum(bool(k["passed"]) for k in checks),
        "checks": len(checks),
        "seeds": [k["seed"] for k in checks],
    }


def _spend(state: dict[str, Any]) -> tuple[int, float]:
    usage = state.get("usage", {}).values()
    tokens = sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in usage)
    return int(tokens), float(sum(u.get("dollars", 0.0) for u in usage))


def row_for(name: str, problem: Problem, paths: RunPaths, how: str, fresh: bool) -> dict[str, Any]:
    """Everything the table says about one problem, read from the run's saved state and folder.

    ``fresh``: the batch re-checks selected kernels on fresh seeds, so one not re-checked yet is unverified.
    """
    state = load_state(paths)
    meta = json.loads(paths.run_json.read_text())
    record = read_record(paths)
    b = state.get("baseline") or {}
    candidates = state.get("candidates", [])
    best = best_candidate(state)  # type: ignore[arg-type]
    tokens, dollars = _spend(state)
    row: dict[str, Any] = {
        **pending_row(name, problem.path, problem),
        "status": "done" if state.get("stop_reason") and paths.report.exists() else "unfinished",
        "this_session": how,
        "run_id": paths.run_id,
        "commit": meta.get("commit"),
        "model": meta["config"].get("model"),
        "device": b.get("device") or {},
        "eager_ms": b.get("eager_ms"),
        "compile_ms": b.get("compile_ms"),
        "best_reference": b.get("best_reference"),
        "floor_ms": b.get("floor_ms"),
        "bound": b.get("bound"),
        "warnings": b.get("warnings", []),
        "stop_reason": state.get("stop_reason"),
        "rounds": state.get("round", 0),
        "candidates": len(candidates),
        "candidates_ok": sum(c.get("status") == "ok" for c in candidates),
        "candidates_accepted": sum(c.get("verdict") == "accepted" for c in candidates),
        "tokens": tokens,
        "dollars": dollars,
        "search_wall_s": record.get("search_wall_s"),
        "fresh_check": record.get("fresh_check"),
        "reason": record.get("error"),
        "fresh_check_error": record.get("fresh_check_error"),
        **memory_of(problem, b, candidates, meta["config"]),
    }
    if record.get("error") and row["status"] != "done":
        row["status"] = "error"
    if row["status"] == "done" and b.get("eager_ms") is None:  # nothing to compare with
        row.update(status="reference failed", reason=explain(state.get("stop_reason") or "", meta["config"]["device"]))
    if row["status"] != "done":
        row["outcome"] = row["status"]
        return row
    ref_ms = min(x for x in (b["eager_ms"], b.get("compile_ms")) if x is not None)
    if best is None:
        row.update(
            reference_stands=True,
            best_id=None,
            template=None,
            idea=None,
            candidate_ms=None,
            speedup_vs_eager=1.0,
            speedup_vs_compile=1.0 if b.get("compile_ms") is not None else None,
            speedup_vs_best=1.0,
            # The result is the faster reference, so its % of roofline is the reference's.
            pct_roofline=100.0 * b["floor_ms"] / ref_ms if b.get("floor_ms") else None,
            run_checks=None,
            verdict=None,
            reduced_precision=[],
        )
    else:
        row.update(
            reference_stands=False,
            best_id=best["id"],
            template=best.get("template"),
            idea=best.get("idea"),
            candidate_ms=(best.get("timing") or {}).get("candidate"),
            speedup_vs_eager=best.get("speedup_vs_eager"),
            speedup_vs_compile=best.get("speedup_vs_compile"),
            speedup_vs_best=best.get("speedup_vs_best"),
            speedup_interval=best.get("speedup_interval"),  # None: a run saved before intervals
            speed=best.get("speed"),
            pct_roofline=best.get("pct_roofline"),
            run_checks=_checks(best),
            verdict=best.get("verdict"),
            reduced_precision=best.get("reduced_precision"),  # None: a run saved before it was recorded
        )
    row["verified"] = verified(row, fresh)
    row.update(best_kernel(row, candidates))
    row["tried"] = [tried(c) for c in candidates]
    row["outcome"] = outcome(row)
    return row


def memory_of(
    problem: Problem, baseline: dict[str, Any], candidates: list[dict[str, Any]], config: dict[str, Any]
) -> dict[str, Any]:
    """The run's memory against its plan: the pre-check's estimate, one eager forward's peak as the worker measured
    it, and the largest peak of the run's jobs (the baseline's, each candidate's check and timing), with its ratio
    to the eager peak. Empty for a run saved before jobs reported their memory."""
    reports = [r for r in [baseline.get("memory"), *(c.get("memory") for c in candidates)] if r]
    if not reports:
        return {}
    largest = max(reports, key=lambda r: r["peak_bytes"])
    eager = largest["eager_peak_bytes"]
    device = "cuda" if (baseline.get("device") or {}).get("gpu") else "cpu"
    return {
        "memory_estimate_bytes": working_set_bytes(problem.info, config.get("n_checks", 5), device),
        "eager_peak_bytes": eager,
        "peak_bytes": largest["peak_bytes"],
        "peak_over_eager": largest["peak_bytes"] / eager if eager else None,
    }


def verified(row: dict[str, Any], fresh: bool = True) -> bool | None:
    """Is the selected result correct? The reference is; a kernel must pass the run's checks and, when the
    batch re-checks kernels (``fresh``), the fresh-seed re-check. None: a kernel not re-checked yet."""
    if row.get("reference_stands"):
        return True
    rc = row.get("run_checks") or {}
    if not (row.get("verdict") == "accepted" and rc.get("checks", 0) > 0 and rc["passed"] == rc["checks"]):
        return False
    check = row.get("fresh_check")
    if check is None:
        return None if fresh else True
    return bool(check["accepted"])


def best_kernel(row: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest correct kernel of the search, selected or not (KernelBench's fast_p asks whether a
    correct kernel exists and how fast it is, even when it is slower than the reference).

    A selected kernel that failed its fresh-seed re-check is not correct, whatever the run said.
    """
    correct = [
        c
        for c in candidates
        if c.get("verdict") == "accepted"
        and c.get("speedup_vs_eager") is not None
        and not (c["id"] == row.get("best_id") and row.get("verified") is False)
    ]
    fastest = max(correct, key=lambda c: c["speedup_vs_eager"], default=None)
    return {
        "kernel_correct": fastest is not None,
        "kernel_id": fastest["id"] if fastest else None,
        "kernel_template": fastest.get("template") if fastest else None,
        "kernel_speedup_vs_eager": fastest["speedup_vs_eager"] if fastest else None,
        "kernel_speedup_vs_best": fastest.get("speedup_vs_best") if fastest else None,
    }


def tried(c: dict[str, Any]) -> dict[str, Any]:
    """One candidate of the search in brief, so a table's record says what lost and by how much: its template
    point (the searched parameters a builtin point moved from their defaults; the problem's facts left out), its
    verdict, its time and its speedup against the faster reference (None: not timed)."""
    template = TEMPLATES.get(c.get("template") or "")
    params = c.get("params") or {}
    searched = template.params if template is not None else ()
    moved = {p.name: params[p.name] for p in searched if p.name in params and params[p.name] != p.default}
    return {
        "id": c["id"],
        "template": c.get("template"),
        "params": moved,
        "status": c.get("status"),
        "verdict": c.get("verdict"),
        "ms": (c.get("timing") or {}).get("candidate"),
        "speedup_vs_best": c.get("speedup_vs_best"),
    }


def outcome(row: dict[str, Any]) -> str:
    """The verdict of a finished problem in a few words."""
    if row.get("reference_stands"):
        return "correct, not faster" if row.get("kernel_correct") else "no correct kernel"
    return {True: "faster", False: "incorrect", None: "not re-checked yet"}[row.get("verified")]
