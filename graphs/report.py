"""``kforge report``: a run as one self-contained HTML file (``runs/<id>/report.html``).

Inline CSS, a few lines of vanilla JS and an SVG plot drawn in Python: no external asset and no
network, so the file opens the same on an air-gapped cluster. It renders the records of
``graphs.rundata``, exactly what ``kforge trace`` shows. Every piece of run text goes through
``html.escape``: candidate sources and model answers are untrusted.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from graphs.plot import Point, speedup_svg
from graphs.rundata import CandidateRecord, RunData
from graphs.trace import fmt
from tools.keys import redact

STYLE_PATH = Path(__file__).with_name("report_assets")


def esc(x: object) -> str:
    return escape(str(x), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def pairs(items: Iterable[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return f'<table class="kv">{rows}</table>'


def pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text.strip() else '<p class="muted">(empty)</p>'


def fold(title: str, body: str, *, open_: bool = False, cls: str = "", id_: str = "") -> str:
    attrs = (f' id="{esc(id_)}"' if id_ else "") + (f' class="{cls}"' if cls else "") + (" open" if open_ else "")
    return f"<details{attrs}><summary>{title}</summary>{body}</details>"


def diff_html(old_label: str, old: str | None, new_label: str, new: str) -> str:
    if old is None:
        return f'<p class="muted">{esc(old_label)}: source not available (file gone or changed since the run)</p>'
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), fromfile=old_label, tofile=new_label, lineterm="")
    )
    if not lines:
        return f'<p class="muted">identical to {esc(old_label)}</p>'
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    out = []
    for line in lines:
        kind = "file" if line.startswith(("+++", "---")) else kinds.get(line[:1], "ctx")
        out.append(f'<span class="{kind}">{esc(line)}</span>')
    return '<pre class="diff">' + "\n".join(out) + "</pre>"


def badge(c: CandidateRecord) -> str:
    tone = "good" if c.verdict == "accepted" else "bad" if c.verdict == "rejected" or c.status != "ok" else "neutral"
    return f'<span class="badge {tone}">{esc(c.status)}/{esc(c.verdict or "unjudged")}</span>'


def candidate_summary(c: CandidateRecord, best_id: str | None) -> str:
    star = ' <span class="star" title="best candidate">★</span>' if c.id == best_id else ""
    return (
        f'<span class="cid">{esc(c.id)}</span>{star} {badge(c)} '
        f'<span class="num">{esc(c.speedup_text)}</span> '
        f'<span class="muted">{esc(fmt(c.pct_roofline, ".1f", "% roofline"))}</span> '
        + (
            '<span class="muted" title="see its correctness checks">· reduced precision</span> '
            if c.reduced_precision
            else ""
        )
        + f'<span class="idea">{esc(c.idea if len(c.idea) <= 110 else c.idea[:109] + "…")}</span>'
    )


# ------------------------------------------------------------------------------------------ sections


def header(run: RunData) -> str:
    cfg, best = run.config, run.best
    if best is not None:
        headline = (
            f"best: {best.id} at {fmt(best.speedup_vs_best, '.3f', '×')} vs the faster of eager and torch.compile"
        )
    else:
        headline = "no verified candidate beat the reference: the result is the reference (speedup 1.0×)"
    facts = [
        f"problem <b>{esc(run.problem.get('name', '?'))}</b>",
        f"device {esc(cfg.get('device', '?'))}",
        f"model {esc(cfg.get('model', '?'))}",
        f"policy {esc(cfg.get('policy', '?'))}",
        f"round {run.round} of {esc(cfg.get('rounds', '?'))} · {cfg.get('ideas', '?')} ideas a round",
        f"{len(run.candidates)} candidates",
        f"stop: {esc(run.stop_reason or 'still running or stopped')}",
        f"created {esc(run.meta.get('created_at', '?'))}",
    ]
    return (
        f"<header><h1>kernelforge run <code>{esc(run.run_id)}</code></h1>"
        f'<p class="headline">{esc(headline)}</p><p class="facts">{" · ".join(facts)}</p></header>'
    )


def reference_section(run: RunData) -> str:
    r, p = run.reference, run.problem
    out = ['<section id="problem"><h2>Problem and reference</h2>']
    out.append(pairs([("name", p.get("name", "?")), ("file", p.get("path", "?")), ("sha256", p.get("sha256", "?"))]))
    if r is None:
        out.append('<p class="muted">the reference has not been timed (the run stopped before its baseline)</p>')
    else:
        out.append(
            table(
                ["reference", "median ms", "speedup vs eager"],
                [
                    ["eager", fmt(r.eager_ms, ".4f"), "1.000×"],
                    [
                        "torch.compile",
                        fmt(r.compile_ms, ".4f"),
                        fmt(r.eager_ms / r.compile_ms if r.eager_ms and r.compile_ms else None, ".3f", "×"),
                    ],
                    [f"roofline floor ({r.bound or '?'}-bound)", fmt(r.floor_ms, ".4f"), ""],
                ],
                cls="num",
            )
        )
        out.append(f"<p>headline speedups are against the faster reference: <b>{esc(r.best_reference)}</b>.</p>")
        out.extend(f'<p class="warning">warning: {esc(w)}</p>' for w in r.warnings)
    out.append(fold("problem source", pre(run.problem_source or "(the problem file is gone or changed since the run)")))
    out.append("</section>")
    return "".join(out)


def best_section(run: RunData) -> str:
    best = run.best
    out = ['<section id="best"><h2>Best candidate</h2>']
    if best is None:
        out.append(
            '<p class="muted">none: no verified candidate beat the reference, so the result is the reference.</p>'
        )
        return "".join([*out, "</section>"])
    out.append(
        pairs(
            [
                ("candidate", best.id),
                ("speedup vs eager", fmt(best.speedup_vs_eager, ".3f", "×")),
                ("speedup vs torch.compile", fmt(best.speedup_vs_compile, ".3f", "×")),
                ("speedup vs the faster reference", best.speedup_text),
                ("% of roofline", fmt(best.pct_roofline, ".1f", "%")),
                ("median ms", fmt(best.timing.get("candidate"), ".4f")),
                ("tolerance policy", best.tolerance),
                ("precision", best.precision),
                ("max abs error", fmt(best.worst("max_abs_error"), ".3g")),
                ("max abs error vs float64", fmt(best.worst("max_abs_error_vs_fp64"), ".3g")),
                ("reference's own error vs float64", fmt(best.worst("reference_abs_error_vs_fp64"), ".3g")),
                ("diagnosis", best.diagnosis or "—"),
                ("idea", best.idea),
            ]
        )
    )
    out.append(f'<p><a href="#cand-{esc(best.id)}">source, diff, logs and timing ↓</a></p></section>')
    return "".join(out)


def plot_section(run: RunData) -> str:
    points = [Point(c.id, c.round, c.speedup_vs_best, c.verdict, c.status, c.id == run.best_id) for c in run.candidates]
    rounds = run.rounds()
    rows = [
        [r.round, r.fastest_id or "—", fmt(r.fastest_speedup, ".3f", "×"), fmt(r.result_so_far, ".3f", "×")]
        for r in rounds
    ]
    return (
        '<section id="progress"><h2>Speedup per round</h2>'
        '<p class="muted">every candidate at its round (click a point for its details); candidates '
        "that failed before timing sit on the strip under the axis. Speedup is against the faster of eager "
        "and torch.compile; the result so far is the best accepted candidate, or the reference (1×) while "
        "none beats it.</p>"
        f'<div class="plot">{speedup_svg(points, rounds)}</div>'
        + table(["round", "fastest candidate", "its speedup", "result so far"], rows, cls="num")
        + "</section>"
    )


def tree_section(run: RunData) -> str:
    children = run.children()
    many = len(run.candidates) > 40  # a big tree starts folded so the page stays readable

    def node(c: CandidateRecord) -> str:
        kids = "".join(node(k) for k in children.get(c.id, []))
        body = (
            f'<div class="node-body"><p>{esc(c.idea)}</p>'
            f"<p>{esc(c.status)}: {esc(c.reason)}"
            + (f" — critic: {esc(c.verdict)}: {esc(c.critic_reason or '')}" if c.verdict else "")
            + f' <a href="#cand-{esc(c.id)}">details ↓</a></p>'
            + (f'<div class="kids">{kids}</div>' if kids else "")
            + "</div>"
        )
        return fold(candidate_summary(c, run.best_id), body, open_=not many, cls="node", id_=f"tree-{c.id}")

    roots = "".join(node(c) for c in children.get(None, [])) or '<p class="muted">no candidates</p>'
    r = run.reference
    ref = f"reference · eager {fmt(r.eager_ms, '.4f')} ms · compile {fmt(r.compile_ms, '.4f')} ms" if r else "reference"
    return (
        '<section id="tree"><h2>Candidate tree</h2>'
        '<p><button type="button" id="expand-all">expand all</button> '
        '<button type="button" id="collapse-all">collapse all</button> '
        '<span class="muted">parent → child: each candidate under the one its idea branched from</span></p>'
        f'<div class="tree"><div class="root">{esc(ref)}</div>{roots}</div></section>'
    )


def _correctness(c: CandidateRecord) -> str:
    checks = (c.correctness or {}).get("checks") or []
    if not checks:
        return '<p class="muted">no correctness checks recorded</p>'
    rows = [
        [
            k.get("seed"),
            "pass" if k.get("passed") else "FAIL",
            fmt(k.get("max_abs_error"), ".3g"),
            fmt(k.get("max_rel_error"), ".3g"),
            fmt(k.get("max_abs_error_vs_fp64"), ".3g"),
            fmt(k.get("reference_abs_error_vs_fp64"), ".3g"),
            k.get("reason") or "",
        ]
        for k in checks
    ]
    heads = ["seed", "result", "max abs err", "max rel err", "vs float64", "reference vs float64", "reason"]
    head = f"<p>tolerance {esc(c.tolerance)} · precision {esc(c.precision)}</p>"
    return head + table(heads, rows, cls="num")


def _timing(c: CandidateRecord) -> str:
    if not c.timing:
        return '<p class="muted">not timed (only verified candidates reach the profiler)</p>'
    items: list[tuple[str, object]] = []
    for key, value in c.timing.items():
        if key.endswith("_spread"):  # (p90 - p10) / median
            items.append((f"{key.removesuffix('_spread')} spread (p90-p10)/median", fmt(100 * value, ".1f", "%")))
        else:
            items.append((f"{key} median ms", fmt(value, ".4f")))
    items += [
        ("speedup vs eager", fmt(c.speedup_vs_eager, ".3f", "×")),
        ("speedup vs torch.compile", fmt(c.speedup_vs_compile, ".3f", "×")),
        ("speedup vs the faster reference", c.speedup_text),
    ]
    return pairs(items)


def _profile(c: CandidateRecord) -> str:
    items: list[tuple[str, object]] = [
        ("diagnosis", c.diagnosis or "—"),
        ("% of roofline", fmt(c.pct_roofline, ".1f", "%")),
    ]
    kernels = ""
    for name, metrics in c.profile.items():
        if name == "profile":  # Nsight Compute (`kforge profile --run`, `kforge run --ncu`): a table of its own
            kernels = ncu_table(metrics)
            continue
        flat = isinstance(metrics, dict) and all(not isinstance(v, dict | list) for v in metrics.values())
        items += [(f"{name}: {k}", v) for k, v in metrics.items()] if flat else [(name, json.dumps(metrics))]
    return pairs(items) + kernels


def ncu_table(data: dict[str, Any]) -> str:
    """A saved ProfileReport: each contender's kernels under Nsight Compute."""
    from tools.ncu import ProfileReport

    report = ProfileReport.model_validate(data)
    rows = []
    for name, c in report.contenders.items():
        ratio = report.traffic_ratio(name)
        rows.append(
            [
                name,
                f"{len(c.kernels)} kernel(s)",
                "",
                "",
                fmt(c.duration_ns / 1e3, ".1f"),
                fmt(c.dram_bytes / 1e6, ".1f") + (f" ({ratio:.2f}× the problem's)" if ratio else ""),
                "",
                "",
                "",
            ]
        )
        for k in c.kernels:
            rows.append(
                [
                    "",
                    k.name,
                    f"{fmt(k.grid, 'd')} × {fmt(k.block, 'd')}",
                    fmt(k.registers, "d"),
                    fmt(k.duration_ns and k.duration_ns / 1e3, ".1f"),
                    fmt(k.dram_bytes / 1e6, ".1f"),
                    fmt(k.sm_pct, ".0f"),
                    fmt(k.memory_pct, ".0f"),
                    fmt(k.occupancy_pct, ".0f"),
                ]
            )
    headers = ["contender", "kernel", "grid × block", "regs", "µs", "DRAM MB", "SM %", "mem %", "occ %"]
    return f"<p>Nsight Compute ({esc(report.ncu)}), one call:</p>" + table(headers, rows, cls="num")


def _jobs(c: CandidateRecord) -> str:
    rows = [
        [j.job_id, j.started_at, j.status or "no answer", fmt(j.wall_s, ".2f"), fmt(j.speedups.get("vs_best"), ".3f")]
        for j in c.jobs
    ]
    phases = " · ".join(f"{k} {v:.2f} s" for k, v in c.phases.items())
    return (table(["job", "started", "status", "wall s", "vs best"], rows, cls="num") if rows else "") + (
        f'<p class="muted">last check\'s phases: {esc(phases)}</p>' if phases else ""
    )


def candidate_section(run: RunData) -> str:
    cards = []
    for c in run.candidates:
        parent_label, parent_source = run.parent_source(c)
        messages = [m for m in run.messages if m.candidate_id == c.id]
        body = (
            pairs(
                [
                    ("parent", c.parent_id or "reference"),
                    ("round", c.round),
                    ("idea", c.idea),
                    ("status", f"{c.status}: {c.reason}"),
                    ("critic", f"{c.verdict}: {c.critic_reason}" if c.verdict else "not judged"),
                    ("coder attempts", c.attempts),
                    ("builtin template", json.dumps(c.params) if c.params else "—"),
                ]
            )
            + "<h4>Correctness</h4>"
            + _correctness(c)
            + "<h4>Timing</h4>"
            + _timing(c)
            + "<h4>Profile</h4>"
            + _profile(c)
            + "<h4>Sandbox jobs</h4>"
            + _jobs(c)
            + fold(
                f"diff against {esc(parent_label)}", diff_html(parent_label, parent_source, c.id, c.source), open_=True
            )
            + fold("source", pre(c.source, "code"))
            + fold("compile log", pre(c.compile_log))
            + fold(f"messages ({len(messages)})", "".join(_message(m) for m in messages))
        )
        cards.append(fold(candidate_summary(c, run.best_id), body, cls="cand", id_=f"cand-{c.id}"))
    return '<section id="candidates"><h2>Candidates</h2>' + "".join(cards) + "</section>"


def _message(m: Any) -> str:
    who = f" ({esc(m.candidate_id)})" if m.candidate_id else ""
    return (
        f'<div class="msg kind-{esc(m.kind)}"><div class="msg-head">[round {m.round}] {esc(m.role)} '
        f'<span class="kind">{esc(m.kind)}</span>{who}</div>{pre(m.content)}</div>'
    )


def agents_section(run: RunData) -> str:
    roles = list(dict.fromkeys(m.role for m in run.messages))
    out = ['<section id="agents"><h2>Agents: messages and tool calls, in order</h2>']
    for role in roles:
        mine = [m for m in run.messages if m.role == role]
        calls = sum(m.kind == "tool_call" for m in mine)
        title = f'<b>{esc(role)}</b> <span class="muted">{len(mine)} messages · {calls} tool calls</span>'
        out.append(fold(title, "".join(_message(m) for m in mine), cls="role", id_=f"role-{role}"))
    out.append(fold(f"event log ({len(run.events)} events from events.jsonl)", _timeline(run)))
    return "".join([*out, "</section>"])


def _timeline(run: RunData) -> str:
    stamps = [e.get("timestamp") for e in run.events if isinstance(e.get("timestamp"), str)]
    t0 = dt.datetime.fromisoformat(stamps[0]) if stamps else None
    skip = {"timestamp", "event", "level", "run_id", "role"}
    rows = []
    for e in run.events:
        stamp = e.get("timestamp")
        offset = (dt.datetime.fromisoformat(stamp) - t0).total_seconds() if t0 and isinstance(stamp, str) else None
        rest = " ".join(f"{k}={v}" for k, v in e.items() if k not in skip)
        rows.append([fmt(offset, ".2f"), e.get("level", ""), e.get("role", ""), e.get("event", ""), rest])
    return table(["t (s)", "level", "role", "event", "fields"], rows, cls="events")


def usage_section(run: RunData) -> str:
    heads = ["role", "wall s", "LLM calls", "input tokens", "output tokens", "$", "LLM s", "tool calls"]
    heads += ["sandbox jobs", "sandbox s (GPU s on CUDA)"]
    rows = [
        [
            u.role,
            f"{u.wall_s:.2f}",
            u.llm_calls,
            u.input_tokens,
            u.output_tokens,
            f"{u.dollars:.4f}",
            f"{u.llm_s:.2f}",
            u.tool_calls,
            u.jobs,
            f"{u.job_s:.2f}",
        ]
        for u in [*run.usage, run.total_usage()]
    ]
    return (
        '<section id="usage"><h2>Spend per role</h2>'
        + table(heads, rows, cls="num usage")
        + '<p class="muted">wall s: time inside the role\'s graph nodes (parallel coders add up); sandbox s: '
        "seconds of sandbox jobs (compile, checks, timing), on the GPU for a CUDA run.</p></section>"
    )


def _ceiling(key: str, value: object) -> object:
    if not isinstance(value, int | float):
        return "—" if value is None else value
    if key.endswith("bytes_per_s"):
        return f"{value / 1e9:.1f} GB/s"
    if key.endswith("_flops"):
        return f"{value / 1e12:.2f} TFLOP/s"
    return value


def environment_section(run: RunData) -> str:
    r = run.reference
    ceilings = (r.ceilings if r else None) or {}
    return (
        '<section id="environment"><h2>Environment</h2>'
        + pairs(run.environment().items())
        + (
            "<h4>Device ceilings (roofline)</h4>" + pairs((k, _ceiling(k, v)) for k, v in ceilings.items())
            if ceilings
            else ""
        )
        + fold("run config (run.json)", pre(json.dumps(run.meta, indent=1)))
        + "</section>"
    )


def render(run: RunData) -> str:
    nav = " ".join(
        f'<a href="#{i}">{t}</a>'
        for i, t in [
            ("problem", "problem"),
            ("best", "best"),
            ("progress", "plot"),
            ("tree", "tree"),
            ("candidates", "candidates"),
            ("agents", "agents"),
            ("usage", "spend"),
            ("environment", "environment"),
        ]
    )
    sections = [
        header(run),
        f"<nav>{nav}</nav>",
        reference_section(run),
        best_section(run),
        plot_section(run),
        tree_section(run),
        candidate_section(run),
        agents_section(run),
        usage_section(run),
        environment_section(run),
    ]
    style = (STYLE_PATH / "report.css").read_text()
    script = (STYLE_PATH / "report.js").read_text()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>kernelforge · {esc(run.run_id)}</title><style>{style}</style></head>"
        f"<body>{''.join(sections)}<script>{script}</script></body></html>\n"
    )


def write_report(run: RunData, path: Path | None = None) -> Path:
    path = path or run.dir / "report.html"
    # Defence in depth: verdicts and logs are redacted where they are made; a run written by an older
    # kforge may still hold a key in its files.
    path.write_text(redact(render(run)), encoding="utf-8")
    return path
