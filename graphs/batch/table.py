"""A batch's outputs: OUT/<label>.json (every row, the summary, one summary per folder, the header facts)
and OUT/<label>.md (the table), rewritten after every problem; and ``merge``, which makes one table of
slices run apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from graphs.batch.metrics import FAST_P, by_group, summarise
from graphs.rundata import reduced_details
from tools.errors import ConfigError
from tools.paths import write_atomic

Render = Callable[[dict[str, Any]], str]
Summarise = Callable[[list[dict[str, Any]]], dict[str, Any]]
BATCH_COLUMNS = 13


def x(v: float | None, spec: str = ".3f", suffix: str = "×") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def pct(v: float | None) -> str:
    return x(None if v is None else 100 * v, ".0f", "%")


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB"


def device_name(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    env = next((r["device"] for r in record["rows"] if r.get("device")), {})
    return env.get("gpu") or env.get("cpu") or record["device"], env


def best_cell(r: dict[str, Any]) -> str:
    """The selected result; † marks a kernel that computes below the problem's precision (see ``precision_notes``)."""
    if r.get("reference_stands"):
        return "reference stands"
    return f"{r['best_id']} `{r.get('template') or '?'}`" + (" †" if r.get("reduced_precision") else "")


def precision_notes(rows: list[dict[str, Any]]) -> list[str]:
    """The table's footnote: what each † kernel computes in, which only the relaxed policy allows."""
    marked = [r for r in rows if r.get("status") == "done" and r.get("reduced_precision")]
    if not marked:
        return []
    items = "; ".join(f"{r['name']} ({reduced_details(r['reduced_precision'])})" for r in marked)
    return [f"- † Below the problem's precision, which the relaxed policy allows within its tolerance: {items}."]


def _interval(r: dict[str, Any]) -> str:
    """The selected kernel's 95% interval of its speedup over the faster reference, where it was recorded."""
    low_high = r.get("speedup_interval")
    return f" [{low_high[0]:.3f}, {low_high[1]:.3f}]" if low_high and not r.get("reference_stands") else ""


def _kernel_cell(r: dict[str, Any]) -> str:
    if not r.get("kernel_correct"):
        return "no"
    return f"{r['kernel_id']}: {x(r['kernel_speedup_vs_eager'])} vs eager"


def _fast_cell(p: float) -> Callable[[dict[str, Any]], str]:
    key = f"{p:g}"
    return lambda s: f"{pct(s['fast_p_vs_eager'][key])} / {pct(s['fast_p_vs_best'][key])}"


def group_table(record: dict[str, Any]) -> list[str]:
    """The summaries of the batch's folders (KernelBench's levels) side by side, then the whole batch's; none
    for a batch of one folder, whose summary is the whole batch's."""
    groups = record.get("groups") or {}
    if len(groups) < 2:
        return []
    # A list, not a dict: a folder may be called "all" too.
    columns = [*groups.items(), ("all", record["summary"])]
    metrics: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("problems attempted", lambda s: f"{s['attempted']} of {s['problems']}"),
        ("correct kernels (fast_0)", lambda s: pct(s["fast_p_vs_eager"]["0"])),
        *[(f"fast_{p:g} vs eager / vs faster ref", _fast_cell(p)) for p in FAST_P if p],
        ("geomean vs eager", lambda s: x(s["geomean_vs_eager"])),
        ("geomean vs torch.compile", lambda s: x(s["geomean_vs_compile"])),
        ("geomean vs faster ref", lambda s: x(s["geomean_vs_best"])),
        ("search wall time", lambda s: f"{s['search_wall_s']:.0f} s"),
    ]
    lines = ["", "Per folder (KernelBench's levels):", "", "| | " + " | ".join(name for name, _ in columns) + " |"]
    lines.append("|" + "---|" * (len(columns) + 1))
    lines += [f"| {label} | " + " | ".join(cell(s) for _, s in columns) + " |" for label, cell in metrics]
    return lines


def memory_line(s: dict[str, Any]) -> list[str]:
    """The summary's memory line, where jobs reported their memory."""
    if not s.get("memory_measured"):
        return []
    return [
        f"- Memory over the {s['memory_measured']} problems whose jobs reported it: a job's peak over one eager "
        f"forward's peak {s['peak_over_eager_median']:.2f}× median, {s['peak_over_eager_max']:.2f}× at most; the "
        f"pre-check's estimate {s['estimate_over_peak_min']:.2f}–{s['estimate_over_peak_max']:.2f}× the measured peak."
    ]


def markdown(record: dict[str, Any]) -> str:
    """The batch's table: one row per problem with its verdict and speedups, then the summary."""
    s, rows = record["summary"], record["rows"]
    device, env = device_name(record)
    lines = [
        f"## Batch: {record.get('model', '?')} on {s['problems']} problems — {record['date']}, {device}",
        "",
        f"Commit: `{record['commit']}`. torch {env.get('torch', torch.__version__)}. Command:",
        "",
        "```sh",
        record["command"],
        "```",
        "",
        "| problem | verdict | eager ms | compile ms | best | vs eager | vs compile | vs faster ref "
        "| correct kernel | candidates | tokens | $ | search s |",
        "|" + "---|" * BATCH_COLUMNS,
    ]
    for r in rows:
        if r["status"] != "done":
            cells = [r["name"], f"{r['status']}: {r.get('reason') or r.get('stop_reason') or 'not run yet'}"]
            lines.append("| " + " | ".join(cells + [""] * (BATCH_COLUMNS - len(cells))) + " |")
            continue
        lines.append(
            f"| {r['name']} | {r['outcome']} | {r['eager_ms']:.4f} | {x(r['compile_ms'], '.4f', '')} | "
            f"{best_cell(r)} | {x(r['speedup_vs_eager'])} | {x(r['speedup_vs_compile'])} | "
            f"**{x(r['speedup_vs_best'])}**{_interval(r)} | {_kernel_cell(r)} | {r['candidates']} | "
            f"{r.get('tokens') or 0} | {r.get('dollars') or 0:.2f} | {x(r.get('search_wall_s'), '.0f', '')} |"
        )
    fast = " · ".join(
        f"fast_{p:g} {pct(s['fast_p_vs_eager'][f'{p:g}'])} / {pct(s['fast_p_vs_best'][f'{p:g}'])}" for p in FAST_P
    )
    lines += [
        "",
        f"- Over the {s['attempted']} problems attempted ({s['done']} finished, {s['failed']} failed, "
        f"{s['pending']} not run yet): correct kernels **{pct(s['correctness_rate'])}** (fast_0).",
        f"- fast_p vs eager / vs the faster of eager and torch.compile: {fast}.",
        f"- Geometric mean speedup (a failed, incorrect or slower result counts as 1.0): "
        f"**{x(s['geomean_vs_best'])} vs the faster of eager and torch.compile**, {x(s['geomean_vs_eager'])} vs "
        f"eager, {x(s['geomean_vs_compile'])} vs torch.compile.",
        f"- Spent: {s['tokens']:,} tokens, ${s['dollars']:.2f}, {s['candidates']} candidates, search wall time "
        f"{s['search_wall_s']:.0f} s (this session's batch wall time {record.get('wall_s', 0.0):.0f} s).",
        *memory_line(s),
        *precision_notes(rows),
        *group_table(record),
    ]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, label: str, record: dict[str, Any], render: Render) -> None:
    """Rewrite both files whole, through a rename: a batch killed mid-write still leaves the last table."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / f"{label}.json", json.dumps(record, indent=1, default=str).encode())
    write_atomic(out / f"{label}.md", render(record).encode())


def merge(
    files: list[Path], out: Path, label: str, render: Render = markdown, summary: Summarise = summarise
) -> dict[str, Any]:
    """One table from slices run apart (say on machines that do not outlive a slice): a problem's row
    comes from the last file in which it is not pending; the commit and device must agree."""
    records = [json.loads(f.read_text()) for f in files]
    for key in ("commit", "device"):
        if len({str(r[key]) for r in records}) > 1:
            raise ConfigError(f"--merge: the slices differ in {key}: {sorted({str(r[key]) for r in records})}")
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        for row in record["rows"]:
            if row["status"] != "pending" or row["name"] not in rows:
                rows[row["name"]] = row
    merged = {**records[-1], "date": max(r["date"] for r in records)}
    merged["command"] = "\n".join(dict.fromkeys(r["command"] for r in records))
    merged["wall_s"] = sum(r.get("wall_s") or 0.0 for r in records)
    merged.update(rows=list(rows.values()), summary=summary(list(rows.values())))
    merged["groups"] = by_group(merged["rows"], summary)
    write_outputs(out, label, merged, render)
    return merged
