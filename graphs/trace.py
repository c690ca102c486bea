"""``kforge trace`` as text: the candidate tree, each role's messages, one candidate's details.

It renders the records of ``graphs.rundata``, as the HTML report (``graphs.report``) does, so the two
never disagree.
"""

from __future__ import annotations

from graphs.rundata import CandidateRecord, RunData


def fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def candidate_line(c: CandidateRecord, best_id: str | None) -> str:
    star = " ★" if c.id == best_id else ""
    reduced = " · reduced precision" if c.reduced_precision else ""
    return (
        f"{c.id}{star}  [{c.status}/{c.verdict or 'unjudged'}]  "
        f"{c.speedup_text} vs best ref · {fmt(c.pct_roofline, '.1f', '%')} roofline{reduced}"
        f" · {c.idea[:100]}"
    )


def reference_line(run: RunData) -> str:
    r = run.reference
    if r is None:
        return "reference  not timed yet"
    return (
        f"reference  eager {fmt(r.eager_ms, '.4f')} ms · compile {fmt(r.compile_ms, '.4f')} ms · "
        f"floor {fmt(r.floor_ms, '.4f')} ms ({r.bound or '?'}-bound)"
    )


def tree_lines(run: RunData) -> list[str]:
    """The candidates as a tree under the reference, children under the candidate they branched from."""
    children = run.children()
    lines = [reference_line(run)]

    def walk(parent: str | None, depth: int) -> None:
        for c in children.get(parent, []):
            lines.append("  " * depth + "└─ " + candidate_line(c, run.best_id))
            walk(c.id, depth + 1)

    walk(None, 1)
    return lines


def summary_lines(run: RunData) -> list[str]:
    lines = [f"run {run.run_id} · round {run.round} · stop: {run.stop_reason or 'running'}"]
    for u in run.usage:
        parts = [f"wall {u.wall_s:.3g} s", f"jobs {u.jobs} ({u.job_s:.3g} s)"]
        if u.llm_calls:
            parts += [
                f"llm calls {u.llm_calls}",
                f"tokens {u.input_tokens}+{u.output_tokens}",
                f"${u.dollars:.4f}",
                f"tool calls {u.tool_calls}",
            ]
        lines.append(f"  {u.role:9} " + " · ".join(parts))
    return lines


def role_lines(run: RunData, role: str | None = None, candidate: str | None = None) -> list[str]:
    out = []
    for m in run.messages:
        if role and m.role != role:
            continue
        if candidate and m.candidate_id != candidate:
            continue
        out.append(f"[round {m.round}] {m.role} {m.kind}" + (f" ({m.candidate_id})" if m.candidate_id else ""))
        out.extend("    " + line for line in m.content.splitlines())
    return out


def candidate_detail(run: RunData, cid: str) -> list[str]:
    c = run.candidate(cid)
    if c is None:
        return [f"no candidate {cid}"]
    lines = [candidate_line(c, run.best_id)]
    fields: list[tuple[str, object]] = [
        ("parent_id", c.parent_id),
        ("round", c.round),
        ("attempts", c.attempts),
        ("reason", c.reason),
        ("tolerance", c.tolerance),
        ("precision", c.precision),
        ("max abs err", c.worst("max_abs_error")),
        ("diagnosis", c.diagnosis),
        ("critic_reason", c.critic_reason),
        ("timing", c.timing),
        ("params", c.params),
        ("jobs", [f"{j.job_id} {j.status} {fmt(j.wall_s, '.2f', ' s')}" for j in c.jobs]),
    ]
    lines.extend(f"  {key}: {value}" for key, value in fields)
    if "profile" in c.profile:  # saved by `kforge profile --run` or `kforge run --ncu`
        from tools.ncu import ProfileReport, render

        lines.append("  ncu profile:")
        report = ProfileReport.model_validate(c.profile["profile"])
        lines.extend("    " + line for line in render(report, run.problem.get("name", "problem")).splitlines())
    lines.append("  source:")
    lines.extend("    " + line for line in c.source.splitlines())
    lines.append("  messages:")
    lines.extend("    " + line for line in role_lines(run, candidate=cid))
    return lines
