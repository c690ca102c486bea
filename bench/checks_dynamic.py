"""Run every cheat fixture and a set of legitimate kernels through the full verifier on one device.

    python bench/checks_dynamic.py --device cpu|cuda [--json OUT]

Each evaluation is the real one (``sandbox.evaluation.evaluate`` in a sandboxed worker: static and
dynamic anti-cheat checks, correctness, timing), except that a candidate the static checks reject still runs
(``static_precheck=False``), so that the dynamic half is counted on every fixture. A fixture counts as
caught when it is not accepted and its trick is named; the table says which half named it. Legitimate
kernels: the hand-written candidates for the device and the builtin team's first-round candidates
(``agents.builtin.seeds``) for each small problem; any of them not accepted is a false rejection. Fixtures
that need CUDA are skipped on the CPU.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.builtin.catalog import TEMPLATES, render  # noqa: E402
from agents.builtin.recognise import analyse  # noqa: E402
from agents.builtin.seeds import seeds  # noqa: E402
from sandbox.evaluation import evaluate  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tools.checks import blocking, static_findings  # noqa: E402
from tools.problem import load_problem  # noqa: E402
from tools.protocol import TimingConfig  # noqa: E402

QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)


def judge(problem, source: str, name: str, device: str, policy: str, sandbox: LocalSandbox) -> dict:
    started = time.perf_counter()
    ev = evaluate(
        problem,
        source,
        sandbox=sandbox,
        device=device,
        available_bytes=16 << 30,
        candidate_name=name,
        policy=policy,
        references=("eager",),
        n_checks=3,
        timing=QUICK,
        timeout_s=300,
        with_roofline=False,
        static_precheck=False,  # the dynamic half is what this counts: run what the static checks reject too
    )
    static = {f.trick for f in blocking(static_findings(source, problem.info), policy)}
    dynamic = {f.trick for f in ev.result.findings if f.blocking}
    if ev.result.status == "rejected":
        dynamic.add(ev.result.reason.split(":")[0])
    return {
        "name": name,
        "accepted": ev.accepted,
        "status": ev.result.status,
        "reason": ev.result.reason,
        "static": sorted(static),
        "dynamic": sorted(dynamic),
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sandbox = LocalSandbox()
    softmax = load_problem(ROOT / "problems" / "softmax_small.py")
    rows = []
    for path in sorted((ROOT / "tests" / "fixtures" / "cheats").glob("*.py")):
        source = path.read_text()
        if args.device == "cpu" and "cuda" in source.lower():
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        trick = doc.split(":")[0]
        policy = "strict" if trick == "precision_downgrade" else "relaxed"
        named = re.search(r"^Problem: (\w+)", doc, re.MULTILINE)
        problem = load_problem(ROOT / "problems" / f"{named.group(1)}.py") if named else softmax
        row = judge(problem, source, path.name, args.device, policy, sandbox) | {"trick": trick}
        row["caught"] = not row["accepted"] and (trick in row["static"] or trick in row["dynamic"])
        rows.append(row)
        print(f"{path.stem:40} {row['status']:10} static={row['static']} dynamic={row['dynamic']}", flush=True)
    legit = []
    suffix = "cuda" if args.device == "cuda" else "cpu"
    for family in ("softmax", "layernorm", "matmul"):
        problem = load_problem(ROOT / "problems" / f"{family}_small.py")
        sources = {f"{family}_{suffix}.py": (ROOT / "problems" / "candidates" / f"{family}_{suffix}.py").read_text()}
        shape = analyse(problem.info)
        for i, (template, params) in enumerate(seeds(shape, args.device)):
            extras = {"eps": shape.eps} if "eps" in TEMPLATES[template].extras else {}
            sources[f"{template}_seed{i}.py"] = render(template, {**params, **extras}, args.device)
        for name, source in sources.items():
            row = judge(problem, source, name, args.device, "relaxed", sandbox)
            legit.append(row)
            print(f"{name:40} {row['status']:10} {row['reason'][:90]}", flush=True)
    caught = sum(r["caught"] for r in rows)
    both = sum(r["trick"] in r["static"] and r["trick"] in r["dynamic"] for r in rows)
    dyn = sum(r["trick"] in r["dynamic"] for r in rows)
    false = sum(not r["accepted"] for r in legit)
    print(f"tricks caught: {caught} of {len(rows)} fixtures ({dyn} named by the dynamic checks, {both} by both halves)")
    print(f"legitimate kernels rejected: {false} of {len(legit)}")
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "fixtures": rows, "legitimate": legit}, indent=1))


if __name__ == "__main__":
    main()
