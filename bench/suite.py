"""Run the builtin offline team on every problem of a suite and tabulate what it found.

    python bench/suite.py [PROBLEMS ...] [--device auto] [--rounds 3] [--ideas 3]
                          [--runs-dir runs/suite] [--out DIR] [--only relu,softmax] [--budget-s 450]

PROBLEMS are problem files, folders (every ``*.py`` in it) or globs; the default is ``problems/suite``.
Each problem gets one real ``kforge run`` (the same API the CLI uses: ``graphs.launch.stream_run``) in
``--runs-dir``. The suite is resumable: a problem whose run already finished there with the same
settings and the same commit is read back, not run again, and a run that was killed part-way is resumed. ``--budget-s``
stops starting new problems after that many seconds, so a suite can be run in slices under a time limit;
``--merge OUT_A/suite.json OUT_B/suite.json --out DIR`` makes one table of slices run on machines apart.

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
import datetime as dt
import fnmatch
import glob
import json
import math
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents import builtin  # noqa: E402
from graphs.cli import sandbox_config  # noqa: E402
from graphs.config import Budgets, RunConfig  # noqa: E402
from graphs.launch import stream_run  # noqa: E402
from graphs.logs import configure_logging  # noqa: E402
from graphs.runs import RunPaths, _git_commit, create_run, load_state  # noqa: E402
from graphs.state import best_candidate  # noqa: E402
from sandbox.config import make_sandbox  # noqa: E402
from sandbox.protocol import TimingConfig  # noqa: E402
from tools.device import device_memory_bytes, resolve_device  # noqa: E402
from tools.errors import KernelforgeError  # noqa: E402
from tools.evaluation import evaluate  # noqa: E402
from tools.problem import Problem, load_problem, one_line  # noqa: E402

DEFAULT_PROBLEMS = "problems/suite"
NO_FAMILY = "no builtin idea applies"
# The re-check's seed. The worker derives input seeds as seed * 1_000_003 + i + 1 and builds the weights
# from the seed itself, so this gives inputs and weights that neither the coder (seed 0) nor the
# profiler (seed 1) of the run ever saw.
FRESH_SEED = 7919
COLUMNS = 14  # of the markdown table
RECORD = "suite_record.json"  # what the suite adds to a run folder: its wall time and the re-check
# Settings that must match for a finished run to stand for this suite's run of the same problem.
_COMPARED = ("device", "policy", "model", "rounds", "ideas", "patience", "n_checks", "seed", "compile_reference")


# ----------------------------------------------------------------------------------------- problems


def discover(specs: list[str], only: list[str]) -> list[Path]:
    """Problem files named by ``specs`` (files, folders, globs), kept when a pattern of ``only`` matches."""
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found += sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        elif path.is_file():
            found.append(path)
        else:
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True) if p.endswith(".py"))
            if not matches:
                raise SystemExit(f"suite: {spec}: no such problem file, folder or glob match")
            found += matches
    unique = list(dict.fromkeys(p.resolve() for p in found))  # a problem named twice runs once
    if only:
        unique = [p for p in unique if any(fnmatch.fnmatch(p.stem, o) or o in p.stem for o in only)]
    return unique


def family_of(problem: Problem) -> str:
    """The builtin family the planner will see (the same call it makes), or NO_FAMILY."""
    return builtin.recognise(problem.info) or NO_FAMILY


# ------------------------------------------------------------------------------------------- runs


def run_config(problem: Problem, args: argparse.Namespace, device: str) -> RunConfig:
    return RunConfig(
        problem=str(problem.path),
        device=device,  # type: ignore[arg-type]
        policy=args.policy,
        model="builtin",
        rounds=args.rounds,
        ideas=args.ideas,
        budgets=Budgets(wall_s=args.max_wall),
        sandbox=sandbox_config(args.sandbox),
        compile_reference=not args.no_compile,
        n_checks=args.checks,
        timing=TimingConfig(min_trials=args.trials, min_seconds=args.min_seconds),
    )


def _same_settings(saved: dict[str, Any], config: RunConfig) -> bool:
    mine = json.loads(config.model_dump_json())
    return all(saved.get(k) == mine.get(k) for k in (*_COMPARED, "timing"))


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


def read_record(paths: RunPaths) -> dict[str, Any]:
    file = paths.dir / RECORD
    return json.loads(file.read_text()) if file.exists() else {}


def write_record(paths: RunPaths, record: dict[str, Any]) -> None:
    (paths.dir / RECORD).write_text(json.dumps(record, indent=1))


def progress(name: str) -> Any:
    """One line per round: the suite runs many problems, so the per-node chatter of `kforge run` is too much."""

    def show(node: str, update: dict[str, Any]) -> None:
        if node == "baseline" and update.get("baseline"):
            b = update["baseline"]
            compiled = _x(b["compile_ms"], ".4f", " ms")
            print(f"  [{name}] baseline: eager {b['eager_ms']:.4f} ms, compile {compiled}", flush=True)
        elif node == "critic":
            print(f"  [{name}] round done: best {update.get('best_id') or 'the reference'}", flush=True)
        if update.get("stop_reason"):
            print(f"  [{name}] stop: {update['stop_reason']}", flush=True)

    return show


def search(
    problem: Problem, config: RunConfig, root: Path, verbose: bool, found: tuple[RunPaths, bool] | None
) -> tuple[RunPaths, str]:
    """Run (or resume, or reuse) the problem's search; return its folder and what this call did."""
    if found and found[1]:
        return found[0], "reused"
    if found:  # killed part-way: continue it with the settings it was started with
        paths, how = found[0], "resumed"
        saved = RunConfig.model_validate(json.loads(paths.run_json.read_text())["config"])
    else:
        paths, saved, how = create_run(config, problem, root), config, "new"
    configure_logging(verbose, paths.events)
    start = time.perf_counter()
    try:
        stream_run(saved, paths, resume=how == "resumed", on_update=progress(problem.name))
    finally:
        # The search's wall time is what this process spent in it, summed over sessions (a resumed run
        # does not count the time it lay dead).
        record = read_record(paths)
        record["search_wall_s"] = record.get("search_wall_s", 0.0) + time.perf_counter() - start
        record["sessions"] = record.get("sessions", 0) + 1
        write_record(paths, record)
        configure_logging(verbose, None)
    return paths, how


def fresh_check(problem: Problem, source: str, config: RunConfig, sandbox: Any) -> dict[str, Any]:
    """Re-verify the selected kernel on fresh seeds and weights, as `kforge eval` would (no timing)."""
    ev = evaluate(
        problem,
        source,
        sandbox=sandbox,
        device=config.device,
        available_bytes=device_memory_bytes(config.device),
        candidate_name="best/model_new.py",
        policy=config.policy,
        references=("eager",),
        n_checks=config.n_checks,
        seed=FRESH_SEED,
        time_candidate=False,
        with_roofline=False,
    )
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


# ------------------------------------------------------------------------------------------- rows


def _checks(best: dict[str, Any]) -> dict[str, Any]:
    c = best.get("correctness") or {}
    checks = c.get("checks", [])
    return {
        "passed": sum(bool(k["passed"]) for k in checks),
        "checks": len(checks),
        "seeds": [k["seed"] for k in checks],
    }


def _where(problem: Problem) -> str:
    return str(problem.path.relative_to(ROOT) if problem.path.is_relative_to(ROOT) else problem.path)


def pending_row(problem: Problem, family: str) -> dict[str, Any]:
    return {
        "name": problem.name,
        "path": _where(problem),
        "family": family,
        "input_bytes": problem.info.input_bytes,
        "output_bytes": problem.info.output_bytes,
        "flops": problem.info.flops,
        "status": "pending",
    }


def row_for(problem: Problem, family: str, paths: RunPaths, how: str) -> dict[str, Any]:
    """Everything the table says about one problem, read from the run's saved state and folder."""
    state = load_state(paths)
    meta = json.loads(paths.run_json.read_text())
    record = read_record(paths)
    b = state.get("baseline") or {}
    candidates = state.get("candidates", [])
    best = best_candidate(state)  # type: ignore[arg-type]
    row: dict[str, Any] = {
        **pending_row(problem, family),
        "status": "done" if state.get("stop_reason") and paths.report.exists() else "unfinished",
        "this_session": how,
        "run_id": paths.run_id,
        "commit": meta.get("commit"),
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
        "search_wall_s": record.get("search_wall_s"),
        "fresh_check": record.get("fresh_check"),
    }
    if b.get("eager_ms") is None:  # the reference itself failed: nothing to compare with
        row.update(status="reference failed", reference_stands=None)
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
            pct_roofline=best.get("pct_roofline"),
            run_checks=_checks(best),
            verdict=best.get("verdict"),
        )
    row["verified"] = verified(row)
    return row


def verified(row: dict[str, Any]) -> bool | None:
    """Is the selected result correct? The reference is; a kernel must pass the run's checks and,
    when it was done, the fresh-seed re-check. None: a kernel that has not been re-checked yet."""
    if row.get("reference_stands"):
        return True
    rc = row.get("run_checks") or {}
    run_ok = row.get("verdict") == "accepted" and rc.get("checks", 0) > 0 and rc["passed"] == rc["checks"]
    fresh = row.get("fresh_check")
    if not run_ok:
        return False
    return None if fresh is None else bool(fresh["accepted"])


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r["status"] == "done" and r.get("speedup_vs_best") is not None]

    def gmean(key: str) -> float | None:
        # A kernel that failed its fresh-seed re-check gained nothing: it counts as 1.0, as a standing reference.
        values = [r[key] if r.get("verified") is not False else 1.0 for r in done if r.get(key)]
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None

    kernels = [r for r in done if not r["reference_stands"]]
    return {
        "problems": len(rows),
        "done": len(done),
        "geomean_vs_eager": gmean("speedup_vs_eager"),
        "geomean_vs_compile": gmean("speedup_vs_compile"),
        "geomean_vs_best": gmean("speedup_vs_best"),
        "recognised": sum(r.get("family") not in (None, NO_FAMILY) for r in rows),
        "kernels_selected": len(kernels),
        "kernels_verified_fresh": sum(bool(r.get("fresh_check") and r["fresh_check"]["accepted"]) for r in kernels),
        "kernels_verified": sum(r.get("verified") is True for r in kernels),
        "correctness_rate": (sum(r.get("verified") is True for r in done) / len(done)) if done else None,
        "search_wall_s": sum(r.get("search_wall_s") or 0 for r in rows),
        "candidates": sum(r.get("candidates") or 0 for r in rows),
    }


# ------------------------------------------------------------------------------------------ output


def _x(v: float | None, spec: str = ".3f", suffix: str = "×") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB"


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
    env = next((r["device"] for r in rows if r.get("device")), {})
    device = env.get("gpu") or env.get("cpu") or record["device"]
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
        if r["status"] in ("pending", "error", "reference failed", "unfinished"):
            why = r.get("error") or r.get("stop_reason") or "not run yet"
            cells = [r["name"], _mib(r.get("input_bytes") or 0), r.get("family", "—"), f"{r['status']}: {why[:100]}"]
            lines.append("| " + " | ".join(cells + [""] * (COLUMNS - len(cells))) + " |")
            continue
        best = "reference stands" if r["reference_stands"] else f"{r['best_id']} `{r.get('template') or '?'}`"
        lines.append(
            f"| {r['name']} | {_mib(r['input_bytes'])} | {r['family']} | {r['eager_ms']:.4f} | "
            f"{_x(r['compile_ms'], '.4f', '')} | {best} | {_x(r['speedup_vs_eager'])} | "
            f"{_x(r['speedup_vs_compile'])} | **{_x(r['speedup_vs_best'])}** | {_x(r['pct_roofline'], '.1f', '%')} | "
            f"{_verified_cell(r)} | {r['candidates']} ({r['candidates_accepted']} accepted) | "
            f"{_x(r['search_wall_s'], '.0f', '')} | {r['stop_reason']} |"
        )
    rate = s["correctness_rate"]
    lines += [
        "",
        f"- Geometric mean over {s['done']} of {s['problems']} problems (a problem whose reference stands counts "
        f"as 1.0): **{_x(s['geomean_vs_best'])} vs the faster of eager and torch.compile**, "
        f"{_x(s['geomean_vs_eager'])} vs eager, {_x(s['geomean_vs_compile'])} vs torch.compile.",
        f"- Families recognised: {s['recognised']} of {s['problems']}. Kernels selected: {s['kernels_selected']}; "
        f"verified by the run and again on fresh seeds and weights: {s['kernels_verified_fresh']} of "
        f"{s['kernels_selected']}. Correct results: {_x(None if rate is None else 100 * rate, '.0f', '%')}.",
        f"- Search wall time {s['search_wall_s']:.0f} s in all, {s['candidates']} candidates.",
    ]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(record, indent=1, default=str))
    (out / "suite.md").write_text(markdown(record))


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
    p.add_argument("--max-wall", type=float, default=None, help="wall-time budget of each run, in seconds")
    p.add_argument("--budget-s", type=float, default=None, help="start no new problem after this many seconds")
    p.add_argument("--no-fresh-check", action="store_true", help="skip re-verifying the selected kernels")
    p.add_argument("--sandbox", default="local", choices=["local", "docker"])
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
    """One table from suite slices run apart (say on machines that do not outlive a slice): a problem's row
    comes from the last file in which it is not pending; the date, device and commit must agree."""
    records = [json.loads(f.read_text()) for f in files]
    for key in ("commit", "device"):
        if len({r[key] for r in records}) > 1:
            raise SystemExit(f"suite: --merge: the slices differ in {key}: {sorted({str(r[key]) for r in records})}")
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        for row in record["rows"]:
            if row["status"] != "pending" or row["name"] not in rows:
                rows[row["name"]] = row
    merged = {**records[-1], "date": max(r["date"] for r in records)}
    merged["command"] = "\n".join(dict.fromkeys(r["command"] for r in records))
    merged.update(rows=list(rows.values()), summary=summarise(list(rows.values())))
    write_outputs(out, merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_intermixed_args(argv)  # problems may come after options too
    args.out = args.out or args.runs_dir  # both under runs/ by default, which git ignores
    if args.merge:
        merged = merge([Path(f) for f in args.problems], args.out)
        print(f"suite: merged {len(merged['rows'])} rows into {args.out / 'suite.md'}")
        return 0
    try:
        device = resolve_device(args.device)
    except KernelforgeError as exc:
        print(f"suite: {exc}", file=sys.stderr)
        return exc.exit_code
    paths = discover(args.problems, [o for o in args.only.split(",") if o])
    if not paths:
        raise SystemExit("suite: no problem left after --only")
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(args.verbose, None)
    record: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "commit": _git_commit(),
        "device": device,
        "command": shlex.join(["python3", "bench/suite.py", *argv]),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    rows: list[dict[str, Any]] = [{"name": p.stem, "path": str(p), "status": "pending"} for p in paths]
    checker = None if args.no_fresh_check else make_sandbox(sandbox_config(args.sandbox))
    start = time.perf_counter()
    try:
        for i, path in enumerate(paths):
            # Past the budget no new search starts, but finished runs are still read back into the table.
            may_search = args.budget_s is None or time.perf_counter() - start <= args.budget_s
            rows[i] = one_problem(path, args, device, record["commit"], checker, may_search)
            record.update(rows=rows, summary=summarise(rows))
            write_outputs(args.out, record)
    finally:
        close = getattr(checker, "close", None)
        if close:
            close()
    record.update(rows=rows, summary=summarise(rows))
    write_outputs(args.out, record)
    s = record["summary"]
    left = sum(r["status"] == "pending" for r in rows)
    if left:
        print(f"suite: --budget-s {args.budget_s:g} spent; {left} problem(s) left: run the same command again")
    print(
        f"suite: {s['done']} of {s['problems']} done · geomean vs faster ref {_x(s['geomean_vs_best'])} · "
        f"vs eager {_x(s['geomean_vs_eager'])} · vs compile {_x(s['geomean_vs_compile'])} · "
        f"{args.out / 'suite.md'}",
        flush=True,
    )
    return 0


def one_problem(
    path: Path, args: argparse.Namespace, device: str, commit: str | None, checker: Any, may_search: bool
) -> dict[str, Any]:
    """Search one problem (or read back its finished run), re-check its kernel, and make its row.

    Any failure becomes the row's error: one broken problem must not cost the rest of a long suite.
    """
    name = path.stem
    try:
        problem = load_problem(path)
        family = family_of(problem)
        config = run_config(problem, args, device)
        found = find_run(args.runs_dir, problem, config, commit)
        if not may_search and not (found and found[1]):
            return pending_row(problem, family)
        print(f"suite: {name} ({family})", flush=True)
        run, how = search(problem, config, args.runs_dir, args.verbose, found)
        state = load_state(run)
        best = best_candidate(state)  # type: ignore[arg-type]
        record = read_record(run)
        if best is not None and checker is not None and may_search and "fresh_check" not in record:
            try:
                record["fresh_check"] = fresh_check(problem, best["source"], config, checker)
                write_record(run, record)
            except KernelforgeError as exc:  # the sandbox failed, not the kernel: leave it unchecked, retry later
                print(f"suite: {name}: the fresh-seed check could not run: {exc}", file=sys.stderr, flush=True)
        row = row_for(problem, family, run, how)
    except Exception as exc:  # recorded in the row and printed with its traceback
        traceback.print_exc()
        return {"name": name, "path": str(path), "status": "error", "error": one_line(exc)}
    print(
        f"suite: {name}: {row['status']} ({how}) · best {row.get('best_id') or 'reference'} · "
        f"vs faster ref {_x(row.get('speedup_vs_best'))} · verified {row.get('verified')}",
        flush=True,
    )
    return row


if __name__ == "__main__":
    sys.exit(main())
