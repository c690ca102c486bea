"""Run the builtin offline team on every problem of a suite and tabulate what it found.

    python bench/suite.py [PROBLEMS ...] [--device auto] [--rounds 3] [--ideas 3] [--parallel 1]
                          [--runs-dir runs/suite] [--out DIR] [--only relu,softmax] [--budget-s 450]

A preset of ``kforge batch`` (``graphs.batch``): the builtin team, the fresh-seed re-check of every
selected kernel, and the suite's own table. PROBLEMS are problem files, folders (every ``*.py`` in it)
or globs; the default is ``problems/suite``. Each problem gets one real run (the same graph ``kforge
run`` streams) in ``--runs-dir``. The suite is resumable: a problem whose run already finished there with
the same settings and the same commit is read back, not run again, and a run that was killed part-way is
resumed. ``--budget-s`` stops starting new problems after that many seconds, so a suite can be run in
slices under a time limit; ``--merge OUT_A/suite.json OUT_B/suite.json --out DIR`` makes one table of
slices run on machines apart.

After every problem, OUT/suite.json (every row, with the run's own records) and OUT/suite.md (the table
for bench/RESULTS.md, with date, device, commit and command) are rewritten, so a killed suite still
leaves its table. Per problem: the family the builtin team recognised, the best candidate, whether it
was verified (the run's checks, and a re-check of ``best/model_new.py`` on fresh seeds and fresh
weights that the run never used), its speedup against eager, torch.compile and the faster of the two,
its % of the roofline floor, the search's wall time and the candidates tried. When no candidate beat the
faster reference, the reference stands and every speedup is 1.0.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graphs import batch  # noqa: E402
from graphs.batch.rows import NO_FAMILY, verified  # noqa: E402
from graphs.batch.runner import FRESH_SEED  # noqa: E402
from graphs.batch.table import best_cell, device_name, mib, precision_notes, x  # noqa: E402
from graphs.cli import add_sandbox_options, add_timing_mode, sandbox_config, say  # noqa: E402
from graphs.config import Budgets, RunConfig  # noqa: E402
from graphs.logs import configure_logging  # noqa: E402
from sandbox.backends import job_machine  # noqa: E402
from tools.errors import KernelforgeError  # noqa: E402
from tools.protocol import TimingConfig  # noqa: E402

DEFAULT_PROBLEMS = "problems/suite"
COLUMNS = 14  # of the markdown table
__all__ = ["FRESH_SEED", "NO_FAMILY", "main", "markdown", "merge", "summarise", "verified"]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch summary, where ``correctness_rate`` keeps the meaning the suite's table has always given it
    (bench/RESULTS.md): the share of finished problems whose selected result, a kernel or the standing
    reference, is verified. The batch's own (KernelBench's fast_0: a correct kernel exists) is fast_p_vs_eager."""
    summary = batch.summarise(rows)
    summary["correctness_rate"] = summary["results_verified_rate"]
    return summary


# ------------------------------------------------------------------------------------------ output


def _verified_cell(r: dict[str, Any]) -> str:
    if r.get("reference_stands"):
        return "reference"
    rc, fresh = r.get("run_checks") or {}, r.get("fresh_check")
    run = f"run {rc.get('passed', 0)}/{rc.get('checks', 0)}"
    if fresh is None:
        return f"{run} · fresh: not checked"
    mark = "yes" if r.get("verified") else "**NO**"
    return f"{mark}: {run} · fresh {fresh['passed']}/{fresh['checks']}" + (
        "" if fresh["accepted"] else f" ({fresh['status']}: {fresh['reason'][:60]})"
    )


def markdown(record: dict[str, Any]) -> str:
    s, rows = record["summary"], record["rows"]
    device, env = device_name(record)
    lines = [
        f"## Suite: the builtin team on {s['problems']} problems — {record['date']}, {device}",
        "",
        f"Commit: `{record['commit']}`. torch {env.get('torch', torch.__version__)}. Command:",
        "",
        "```sh",
        record["command"],
        "```",
        "",
        "| problem | input | family | eager ms | compile ms | best | vs eager | vs compile | vs faster ref "
        "| % roofline | verified (fresh seeds) | candidates | search s | stop |",
        "|" + "---|" * COLUMNS,
    ]
    for r in rows:
        if r["status"] != "done":
            why = r.get("reason") or r.get("stop_reason") or "not run yet"
            cells = [r["name"], mib(r.get("input_bytes") or 0), r.get("family", "—"), f"{r['status']}: {why[:100]}"]
            lines.append("| " + " | ".join(cells + [""] * (COLUMNS - len(cells))) + " |")
            continue
        lines.append(
            f"| {r['name']} | {mib(r['input_bytes'])} | {r['family']} | {r['eager_ms']:.4f} | "
            f"{x(r['compile_ms'], '.4f', '')} | {best_cell(r)} | {x(r['speedup_vs_eager'])} | "
            f"{x(r['speedup_vs_compile'])} | **{x(r['speedup_vs_best'])}** | {x(r['pct_roofline'], '.1f', '%')} | "
            f"{_verified_cell(r)} | {r['candidates']} ({r['candidates_accepted']} accepted) | "
            f"{x(r['search_wall_s'], '.0f', '')} | {r['stop_reason']} |"
        )
    rate = s["correctness_rate"]
    lines += [
        "",
        f"- Geometric mean over {s['attempted']} of {s['problems']} problems (a problem whose reference stands, "
        f"or that failed, counts as 1.0): **{x(s['geomean_vs_best'])} vs the faster of eager and torch.compile**, "
        f"{x(s['geomean_vs_eager'])} vs eager, {x(s['geomean_vs_compile'])} vs torch.compile.",
        f"- Families recognised: {s['recognised']} of {s['problems']}. Kernels selected: {s['kernels_selected']}; "
        f"verified by the run and again on fresh seeds and weights: {s['kernels_verified_fresh']} of "
        f"{s['kernels_selected']}. Correct results: {x(None if rate is None else 100 * rate, '.0f', '%')}.",
        f"- Search wall time {s['search_wall_s']:.0f} s in all, {s['candidates']} candidates.",
        *precision_notes(rows),
        *tried_lines(rows),
    ]
    return "\n".join(lines) + "\n"


def tried_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Under the table, each finished problem's candidates on one line: the point (parameters moved from the
    template's defaults), then its time and speedup against the faster reference, or its verdict if it has none.
    The selected kernel is one of them; the others say how close the search came, and which points lost."""
    out = []
    for r in rows:
        if r["status"] != "done" or not r.get("tried"):
            continue  # rows recorded before candidates were kept have no "tried"
        parts = []
        for c in r["tried"]:
            point = " ".join(f"{k}={v}" for k, v in c["params"].items())
            what = f"`{c['template']}`" + (f" {point}" if point else "") if c["template"] else "a written kernel"
            if c["verdict"] == "accepted" and c["speedup_vs_best"] is not None:
                result = f"{c['ms']:.4f} ms, {c['speedup_vs_best']:.3f}×"
            else:
                result = c["verdict"] or c["status"] or "not evaluated"
            parts.append(f"{c['id']} {what}: {result}")
        out.append(f"- {r['name']}: " + "; ".join(parts))
    if not out:
        return []
    return ["", "Every candidate (time, and speedup against the faster reference):", "", *out]


# --------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Run the builtin team on every problem of a suite; write the table.")
    p.add_argument("problems", nargs="*", default=[DEFAULT_PROBLEMS], help="problem files, folders or globs")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ideas", type=int, default=3, help="ideas (candidates) per round")
    p.add_argument("--policy", default="relaxed", choices=["relaxed", "strict"])
    p.add_argument("--checks", type=int, default=5, help="seeded input sets per verification (default 5)")
    p.add_argument("--trials", type=int, default=100, help="minimum timed calls per contender (default 100)")
    p.add_argument("--min-seconds", type=float, default=0.5, help="minimum timing duration (default 0.5)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference")
    add_timing_mode(p)
    p.add_argument("--max-wall", type=float, default=None, help="wall-time budget of each run, in seconds")
    p.add_argument("--budget-s", type=float, default=None, help="start no new problem after this many seconds")
    p.add_argument("--parallel", type=int, default=1, help="problems searched at once (default 1)")
    p.add_argument("--no-fresh-check", action="store_true", help="skip re-verifying the selected kernels")
    add_sandbox_options(p)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/suite"), help="run folders (default runs/suite)")
    p.add_argument("--out", type=Path, default=None, help="where suite.md and suite.json go (default: --runs-dir)")
    p.add_argument("--only", default="", help="comma-separated name patterns or substrings to keep")
    p.add_argument(
        "--merge",
        action="store_true",
        help="combine the suite.json files given as PROBLEMS (slices of one suite run apart) into one table in --out",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def merge(files: list[Path], out: Path) -> dict[str, Any]:
    """One table from suite slices run apart: see graphs.batch.merge."""
    try:
        return batch.merge(files, out, "suite", markdown, summarise)
    except KernelforgeError as exc:
        raise SystemExit(f"suite: {exc}") from exc


def run_config(args: argparse.Namespace, device: str) -> RunConfig:
    return RunConfig(
        problem="",  # each problem's own path replaces it
        device=device,  # type: ignore[arg-type]
        policy=args.policy,
        model="builtin",
        rounds=args.rounds,
        ideas=args.ideas,
        budgets=Budgets(wall_s=args.max_wall),
        sandbox=sandbox_config(args),
        compile_reference=not args.no_compile,
        n_checks=args.checks,
        timing=TimingConfig(min_trials=args.trials, min_seconds=args.min_seconds, hide_launch=not args.count_launch),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_intermixed_args(argv)  # problems may come after options too
    args.out = args.out or args.runs_dir  # both under runs/ by default, which git ignores
    if args.merge:
        merged = merge([Path(f) for f in args.problems], args.out)
        print(f"suite: merged {len(merged['rows'])} rows into {args.out / 'suite.md'}")
        return 0
    configure_logging(args.verbose, None)
    try:
        device = job_machine(sandbox_config(args), args.device)[0]
        paths = batch.discover(args.problems, [o for o in args.only.split(",") if o])
        if not paths:
            raise SystemExit("suite: no problem left after --only")
        settings = batch.BatchSettings(
            runs_dir=args.runs_dir,
            out=args.out,
            command=shlex.join(["python3", "bench/suite.py", *argv]),
            label="suite",
            parallel=args.parallel,
            budget_s=args.budget_s,
            fresh_check=not args.no_fresh_check,
            verbose=args.verbose,
            say=say,
            render=markdown,
            summary=summarise,
            options={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        )
        record = batch.run_batch(paths, run_config(args, device), settings)
    except KernelforgeError as exc:
        print(f"suite: {exc}", file=sys.stderr)
        return exc.exit_code
    s = record["summary"]
    if s["pending"]:
        print(f"suite: --budget-s {args.budget_s:g} spent; {s['pending']} problem(s) left: run the same command again")
    print(
        f"suite: {s['done']} of {s['problems']} done · geomean vs faster ref {x(s['geomean_vs_best'])} · "
        f"vs eager {x(s['geomean_vs_eager'])} · vs compile {x(s['geomean_vs_compile'])} · "
        f"{args.out / 'suite.md'}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
