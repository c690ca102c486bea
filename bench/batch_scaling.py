"""The same ``kforge batch`` under several settings, one after the other: throughput and whether the results agree.

    python bench/batch_scaling.py problems/suite --out runs/scaling \
        --config one-gpu="--gpus 0" --config all-gpus="" \
        --common "--device cuda --rounds 2 --ideas 2 --parallel 4 --fresh-check"

Each ``--config NAME=ARGS`` runs ``kforge batch PROBLEMS ARGS COMMON`` with its own runs folder (OUT/NAME), so
no run is resumed from another configuration. For each: its wall time, the sandbox jobs its runs sent (distinct
job ids in their events.jsonl), jobs per minute, and the ratio of its wall time to the first configuration's.
Then, per problem, the kernel each configuration selected (template and parameters, or the reference), its
verdict and its speedup vs the faster reference, and whether kernel and verdict agree (two candidates within
the timing noise of each other may trade places). Writes OUT/scaling.md and OUT/scaling.json and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graphs.rundata import read_events  # noqa: E402
from graphs.runs import RunPaths, load_state  # noqa: E402


def run_config(problems: list[str], out: Path, args: list[str]) -> tuple[float, int]:
    """Run the batch; (wall seconds, exit code)."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "graphs.cli", "batch", *problems, "--runs-dir", str(out), "--out", str(out), *args]
    # From the caller's folder, so that relative problem paths and globs mean what they meant there.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, check=False)
    return time.perf_counter() - started, proc.returncode


def selections(out: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """(problem -> what its run selected, sandbox jobs sent by all the runs) from a batch's folder."""
    record = json.loads((out / "batch.json").read_text())
    picked, jobs = {}, 0
    for row in record["rows"]:
        entry = {"kernel": None, "verdict": row.get("outcome"), "verified": row.get("verified")}
        entry["speedup_vs_best"] = row.get("speedup_vs_best")
        picked[row["name"]] = entry
        if not row.get("run_id"):
            continue
        paths = RunPaths(out / row["run_id"])
        state = load_state(paths)
        best = next((c for c in state.get("candidates", []) if c["id"] == state.get("best_id")), None)
        # "spec" holds the problem's facts (shapes, the traced ops): the same in every run of one problem.
        params = {k: v for k, v in (best or {}).get("params", {}).items() if k != "spec"}
        entry["kernel"] = (
            "reference" if best is None else f"{best.get('template')} {json.dumps(params, sort_keys=True)}"
        )
        jobs += len({e["job_id"] for e in read_events(paths.events) if "job_id" in e})
    return picked, jobs


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×"


def markdown(results: list[dict[str, Any]]) -> str:
    first = results[0]
    lines = [
        "| configuration | batch options | exit | wall s | sandbox jobs | jobs / min | wall vs first |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | `{r['args'] or '(none)'}` | {r['exit']} | {r['wall_s']:.1f} | {r['jobs']} | "
            f"{60 * r['jobs'] / r['wall_s']:.1f} | {first['wall_s'] / r['wall_s']:.2f}× |"
        )
    problems = sorted(set().union(*(r["picked"] for r in results)))
    agree = 0
    lines += [
        "",
        "| problem | " + " | ".join(r["name"] for r in results) + " | same |",
        "|---|" + "---|" * (len(results) + 1),
    ]
    for p in problems:
        seen = [r["picked"].get(p) for r in results]
        same = all(
            s is not None and (s["kernel"], s["verdict"]) == (seen[0]["kernel"], seen[0]["verdict"]) for s in seen
        )
        agree += same
        cells = [f"{s['kernel']} · {s['verdict']} · {_ratio(s['speedup_vs_best'])}" if s else "—" for s in seen]
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {'yes' if same else '**no**'} |")
    lines += ["", f"Same kernel and verdict in every configuration: {agree} of {len(problems)} problems."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+", help="as for kforge batch")
    parser.add_argument("--config", action="append", required=True, help="NAME=ARGS, repeatable; run in this order")
    parser.add_argument("--common", default="", help="kforge batch options every configuration gets")
    parser.add_argument("--out", type=Path, required=True, help="a folder per configuration goes here")
    args = parser.parse_args()
    results = []
    for spec in args.config:
        name, sep, extra = spec.partition("=")
        if not sep or not name or "/" in name:
            parser.error(f"--config {spec!r}: give NAME=ARGS (ARGS may be empty), NAME without '/'")
        out = args.out / name
        wall, code = run_config(args.problems, out, [*shlex.split(extra), *shlex.split(args.common)])
        if code == 2:  # kforge's bad-input exit: its one-line error is above; no other configuration fares better
            sys.exit(f"batch_scaling: configuration {name}: kforge batch refused its options or problems")
        picked, jobs = selections(out) if (out / "batch.json").exists() else ({}, 0)
        results.append({"name": name, "args": extra, "exit": code, "wall_s": wall, "jobs": jobs, "picked": picked})
    text = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.md").write_text(text + "\n")
    (args.out / "scaling.json").write_text(json.dumps({"common": args.common, "results": results}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
