"""Read a run back: the candidate tree, each role's messages, one candidate's details.

``kforge trace`` renders these; the HTML report (a later issue) reads the same functions so the two
never disagree.
"""

from __future__ import annotations

from typing import Any

from agents.base import Candidate


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def candidate_line(c: Candidate, best_id: str | None) -> str:
    star = " ★" if c["id"] == best_id else ""
    return (
        f"{c['id']}{star}  [{c.get('status')}/{c.get('verdict') or 'unjudged'}]  "
        f"{_fmt(c.get('speedup_vs_best'), '.3f', '×')} vs best ref · {_fmt(c.get('pct_roofline'), '.1f', '%')} roofline"
        f" · {c.get('idea', '')[:100]}"
    )


def tree_lines(state: dict[str, Any]) -> list[str]:
    """The candidates as a tree under the reference, children under the candidate they branched from."""
    candidates = state.get("candidates", [])
    children: dict[str | None, list[Candidate]] = {}
    ids = {c["id"] for c in candidates}
    for c in candidates:
        parent = c.get("parent_id") if c.get("parent_id") in ids else None
        children.setdefault(parent, []).append(c)
    b = state.get("baseline") or {}
    lines = [
        f"reference  eager {_fmt(b.get('eager_ms'), '.4f')} ms · compile {_fmt(b.get('compile_ms'), '.4f')} ms · "
        f"floor {_fmt(b.get('floor_ms'), '.4f')} ms ({b.get('bound') or '?'}-bound)"
    ]

    def walk(parent: str | None, depth: int) -> None:
        for c in children.get(parent, []):
            lines.append("  " * depth + "└─ " + candidate_line(c, state.get("best_id")))
            walk(c["id"], depth + 1)

    walk(None, 1)
    return lines


def summary_lines(state: dict[str, Any]) -> list[str]:
    usage = state.get("usage", {})
    lines = [
        f"run {state.get('run_id')} · round {state.get('round', 0)} · stop: {state.get('stop_reason') or 'running'}"
    ]
    for role, u in sorted(usage.items()):
        parts = [f"{k} {v:.3g}" for k, v in sorted(u.items())]
        lines.append(f"  {role:9} " + " · ".join(parts))
    return lines


def role_lines(state: dict[str, Any], role: str | None = None, candidate: str | None = None) -> list[str]:
    out = []
    for m in state.get("messages", []):
        if role and m["role"] != role:
            continue
        if candidate and m.get("candidate_id") != candidate:
            continue
        head = f"[round {m['round']}] {m['role']} {m['kind']}" + (
            f" ({m['candidate_id']})" if m.get("candidate_id") else ""
        )
        out.append(head)
        out.extend("    " + line for line in str(m["content"]).splitlines())
    return out


def candidate_detail(state: dict[str, Any], cid: str) -> list[str]:
    c = next((c for c in state.get("candidates", []) if c["id"] == cid), None)
    if c is None:
        return [f"no candidate {cid}"]
    lines = [candidate_line(c, state.get("best_id"))]
    for key in (
        "parent_id",
        "round",
        "attempts",
        "reason",
        "diagnosis",
        "critic_reason",
        "timing",
        "template",
        "params",
    ):
        lines.append(f"  {key}: {c.get(key)}")
    lines.append("  source:")
    lines.extend("    " + line for line in c.get("source", "").splitlines())
    lines.append("  messages:")
    lines.extend("    " + line for line in role_lines(state, candidate=cid))
    return lines
