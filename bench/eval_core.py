"""Benchmark the evaluation core on a GPU: verdicts, reference times, latency per candidate, spread.

    python bench/eval_core.py --out DIR [--repeats 5] [--skip-load-inline]

Writes DIR/eval_core.json (every JobResult) and DIR/eval_core.md (the tables for bench/RESULTS.md).
Every figure comes from the real `kforge eval` command or the real local sandbox.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox.config import LocalSandboxConfig  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tools.protocol import EvalJob  # noqa: E402

PROBLEMS = {"matmul": "matmul_4096", "softmax": "softmax_4096x65536", "layernorm": "layernorm_16x64x256x256"}
DESIGN_TABLE = {"matmul": (2.697, 2.677), "softmax": (1.056, 0.782), "layernorm": (8.087, 0.321)}


def cli_eval(problem: str, candidate: Path) -> dict:
    cmd = [sys.executable, "-m", "graphs.cli", "eval", problem, str(candidate), "--device", "cuda", "--json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {"stderr": proc.stderr[-2000:]}
    return {"exit_code": proc.returncode, "wall_s": wall, "evaluation": data}


SANDBOXES = {"prefork": LocalSandbox(), "subprocess": LocalSandbox(LocalSandboxConfig(prefork=False))}


def job(problem: str, candidate: Path, references: list[str], mode: str = "prefork") -> dict:
    result = SANDBOXES[mode].run(
        EvalJob(
            problem_name=f"{problem}.py",
            problem_source=(ROOT / "problems" / f"{problem}.py").read_text(),
            candidate_name=candidate.name,
            candidate_source=candidate.read_text(),
            device="cuda",
            references=references,  # type: ignore[arg-type]
        )
    )
    startup = result.wall_s - sum(result.phases.values())
    return {"result": json.loads(result.model_dump_json()), "startup_s": startup}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-load-inline", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict = {"verdicts": {}, "latency": {}, "load_inline": []}
    md: list[str] = []

    # 1. `kforge eval` verdicts for the correct and the deliberately wrong candidate of each problem.
    md += [
        "| problem | candidate | exit | status | eager ms | compile ms | candidate ms | DESIGN eager / compile |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op, problem in PROBLEMS.items():
        for cand in (
            ROOT / "problems" / "candidates" / f"{op}_cuda.py",
            ROOT / "tests" / "fixtures" / "candidates" / f"wrong_{op}_cuda.py",
        ):
            run = cli_eval(problem, cand)
            record["verdicts"][f"{problem}:{cand.name}"] = run
            ev = run["evaluation"]
            res = ev.get("result", {})
            stats = (res.get("timing") or {}).get("stats", {})
            med = {k: f"{v['median_ms']:.3f}" for k, v in stats.items()}
            d = DESIGN_TABLE[op]
            md.append(
                f"| {problem} | {cand.name} | {run['exit_code']} | {res.get('status', '?')} | "
                f"{med.get('eager', '—')} | "
                f"{med.get('compile', '—')} | {med.get('candidate', '—')} | {d[0]} / {d[1]} |"
            )
            print(md[-1], flush=True)

    # 2. Latency of one NVRTC candidate evaluation (fresh worker: startup, compile, 5 checks, timing)
    #    and the spread of the candidate's median over repeated evaluations.
    md += [
        "",
        "| problem | launch | references | runs | job wall median s | startup s | candidate medians ms | spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    walls = []
    configs = [("prefork", ["eager"], args.repeats), ("prefork", ["eager", "compile"], 2), ("subprocess", ["eager"], 2)]
    for op, problem in PROBLEMS.items():
        cand = ROOT / "problems" / "candidates" / f"{op}_cuda.py"
        for mode, refs, n in configs:
            runs = [job(problem, cand, refs, mode) for _ in range(n)]
            record["latency"][f"{problem}:{mode}:{'+'.join(refs)}"] = runs
            w = [r["result"]["wall_s"] for r in runs]
            if (mode, refs) == ("prefork", ["eager"]):
                walls += w
            meds = [r["result"]["timing"]["stats"]["candidate"]["median_ms"] for r in runs if r["result"]["timing"]]
            spread = (max(meds) - min(meds)) / statistics.median(meds) if meds else float("nan")
            md.append(
                f"| {problem} | {mode} | {'+'.join(refs)} | {len(runs)} | {statistics.median(w):.2f} | "
                f"{statistics.median(r['startup_s'] for r in runs):.2f} | {', '.join(f'{m:.4f}' for m in meds)} | "
                f"{100 * spread:.2f}% |"
            )
            print(md[-1], flush=True)
    md.append(
        f"\nMedian NVRTC candidate evaluation (prefork, eager reference, {len(walls)} jobs): "
        f"{statistics.median(walls):.2f} s"
    )
    print(md[-1], flush=True)

    # 3. The load_inline path, same problem and kernel idea, for comparison.
    if not args.skip_load_inline:
        cand = ROOT / "problems" / "candidates" / "softmax_load_inline.py"
        run = job("softmax_4096x65536", cand, ["eager"])
        record["load_inline"].append(run)
        r = run["result"]
        md.append(
            f"load_inline softmax candidate: status {r['status']}, job wall {r['wall_s']:.1f} s, phases {r['phases']}"
        )
        print(md[-1], flush=True)

    (args.out / "eval_core.json").write_text(json.dumps(record, indent=1))
    (args.out / "eval_core.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
