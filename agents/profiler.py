"""The profiler: times each new verified candidate beside the eager reference and diagnoses it.

Speedups against ``torch.compile`` are chained through the eager reference: the baseline measured
compile / eager side by side, each candidate job measures eager / candidate side by side, and the
product is compile / candidate. Every ratio comes from one process, as the median of per-trial ratios
(``tools.timing.paired_ratios``); no absolute time is compared across processes. A noisy timing is said in
the profiler's message (``sandbox.evaluation.noise_flags``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from agents.base import Candidate, RoleContext, larger_memory, message
from agents.hardware import cache_bytes, size
from sandbox.evaluation import evaluate, noise_flags, profile_job
from tools import speed
from tools.errors import CandidateError

log = structlog.get_logger(__name__)
LATENCY_BOUND_MS = 0.02  # below this a call is dominated by launch and dispatch overhead


def diagnose(candidate_ms: float, baseline: dict[str, Any], bytes_moved: int | None = None) -> tuple[str, float | None]:
    """What bounds a candidate, and its percent of the roofline floor. ``bytes_moved``: the problem's inputs, outputs
    and parameters; where they fit in the device's largest cache (``agents.hardware.cache_bytes``) a memory-bound
    floor is not the limit, whatever percent of it the call reaches."""
    floor_ms = baseline.get("floor_ms")
    if not floor_ms:
        return "no roofline floor known", None
    pct = 100.0 * floor_ms / candidate_ms
    if pct > 100:  # small problems live in cache, where the DRAM-bandwidth floor does not bind
        return f"cache-resident: {pct:.0f}% of the DRAM roofline, so its data stays in cache between calls", pct
    if candidate_ms < LATENCY_BOUND_MS or (pct < 5 and candidate_ms < 10 * LATENCY_BOUND_MS):
        return f"latency-bound: {candidate_ms * 1e3:.1f} µs a call, {pct:.1f}% of the {baseline['bound']} roofline", pct
    cache = cache_bytes(baseline)
    if baseline["bound"] == "memory" and bytes_moved and cache and bytes_moved <= cache:
        return (
            f"cache-resident: its {size(bytes_moved)} of inputs, outputs and parameters fit in the {size(cache)} "
            f"{'L2' if (baseline.get('device') or {}).get('gpu') else 'last-level cache'}, so DRAM bandwidth is not "
            f"its limit: at {pct:.1f}% of the bytes floor ({floor_ms:.4f} ms) the time goes to arithmetic the floor "
            "does not count (exp, division), instruction latency or too little parallelism"
        ), pct
    return f"{baseline['bound']}-bound at {pct:.1f}% of roofline (floor {floor_ms:.4f} ms)", pct


class Profiler:
    name = "profiler"
    fan_out = False

    def __call__(self, state: dict[str, Any], ctx: RoleContext) -> dict[str, Any]:
        baseline = state.get("baseline") or {}
        s = ctx.settings
        round_ = state.get("round", 0)
        updates, messages, job_s = [], [], 0.0
        timed: list[tuple[float, dict[str, Any]]] = []
        for c in state.get("candidates", []):
            if c.get("status") != "ok" or c.get("timing") is not None:
                continue
            ev = evaluate(
                ctx.problem,
                c["source"],
                sandbox=ctx.sandbox,
                device=s.device,
                available_bytes=ctx.extras["available_bytes"],
                candidate_name=f"{c['id']}.py",
                policy=s.policy,
                references=("eager",),
                n_checks=1,
                seed=s.seed + 1,
                timing=s.timing,
                with_roofline=False,
            )
            job_s += ev.result.wall_s
            update = Candidate(id=c["id"], memory=larger_memory(c.get("memory"), ev.result.memory))
            if ev.status != "ok" or ev.result.timing is None:
                update.update(status=ev.status, reason=f"profiling: {ev.result.reason}", timing=None)
                updates.append(update)
                continue
            stats = ev.result.timing.stats
            eager_ms, cand_ms = stats["eager"].median_ms, stats["candidate"].median_ms
            vs_eager = ev.result.timing.speedup("eager")  # per-trial pairs: robust to a busy machine's slow spells
            compile_ratio = baseline.get("compile_over_eager")
            vs_compile = vs_eager * compile_ratio if compile_ratio else None
            # Timed beside eager alone: the interval and the medians' ratio over the best reference are eager's
            # scaled by the baseline's compile/eager ratio (whose own uncertainty is not counted).
            scale = min(1.0, compile_ratio) if compile_ratio else 1.0
            vs_best = vs_eager * scale
            interval = ev.result.timing.interval("eager")
            medians = ev.result.timing.medians_ratio("eager", "candidate")
            best_interval = (interval[0] * scale, interval[1] * scale) if interval else None
            said = speed.verdict(best_interval, medians * scale if medians else None)
            diagnosis, pct = diagnose(cand_ms, baseline, ctx.problem.info.bytes_moved)
            update.update(
                timing={"eager": eager_ms, "candidate": cand_ms, "candidate_spread": stats["candidate"].spread},
                speedup_vs_eager=vs_eager,
                speedup_vs_compile=vs_compile,
                speedup_vs_best=vs_best,
                speedup_interval=list(best_interval) if best_interval else None,
                speed=said,
                pct_roofline=pct,
                diagnosis=diagnosis,
            )
            updates.append(update)
            timed.append((vs_best, c))
            shown = speed.describe(vs_best, best_interval, said)
            text = f"{c['id']}: {cand_ms:.4f} ms, {shown} vs best reference; {diagnosis}"
            for flag in noise_flags(ev.result.timing):
                log.warning("timing_noisy", candidate_id=c["id"], detail=flag)
                text += f"\nWARNING: {flag}"
            messages.append(message("profiler", "tool_result", text, round_, c["id"]))
            log.info("candidate_profiled", candidate_id=c["id"], median_ms=cand_ms, speedup_vs_best=vs_best)
        if s.ncu and timed:
            _, fastest = max(timed, key=lambda pair: pair[0])
            update = next(u for u in updates if u["id"] == fastest["id"])
            text, seconds = ncu_profile(ctx, fastest, update)
            job_s += seconds
            messages.append(message("profiler", "tool_result", text, round_, fastest["id"]))
        return {
            "candidates": updates,
            "messages": messages,
            "usage": {"profiler": {"jobs": len(updates), "job_s": job_s}},
        }


def ncu_profile(ctx: RoleContext, candidate: dict[str, Any], update: Candidate) -> tuple[str, float]:
    """Profile the round's fastest candidate under Nsight Compute (``--ncu``): its kernels go into
    candidates/<id>/profile.json and a one-line summary into its diagnosis, for the next round's planner.
    A profile that fails is said in the message; the candidate's verdict does not depend on it."""
    try:
        job = profile_job(
            ctx.problem,
            candidate["source"],
            candidate_name=f"{candidate['id']}.py",
            contenders=["candidate"],
            seed=ctx.settings.seed,
        )
    except CandidateError as exc:  # flagged code is never profiled; the critic rejects it in its turn
        log.warning("ncu_profile_refused", candidate_id=candidate["id"], reason=str(exc))
        return f"{candidate['id']} under ncu: not profiled: {exc}", 0.0
    result = ctx.sandbox.run(job)
    if result.status != "ok" or result.profile is None:
        log.warning("ncu_profile_failed", candidate_id=candidate["id"], status=result.status, reason=result.reason)
        return f"{candidate['id']} under ncu: no profile ({result.status}: {result.reason})", result.wall_s
    report = result.profile.model_copy(update={"problem_bytes": ctx.problem.info.bytes_moved})
    (Path(ctx.run_dir) / "candidates" / candidate["id"] / "profile.json").write_text(report.model_dump_json(indent=1))
    summary = report.summary("candidate")
    update.update(diagnosis=f"{update['diagnosis']}; ncu: {summary}")
    log.info("candidate_ncu_profiled", candidate_id=candidate["id"], summary=summary)
    return f"{candidate['id']} under ncu: {summary}", result.wall_s


def make_profiler(settings: Any) -> Profiler:
    return Profiler()
