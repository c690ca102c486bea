"""Count what the static anti-cheat checks catch and what they wrongly flag.

    python bench/checks_static.py

Tricks: every fixture in tests/fixtures/cheats/ (one trick each, named first in its docstring) whose trick
shows in source must be flagged with that trick. Legitimate sources: the hand-written candidates in
problems/candidates/ and every valid parameter point of every builtin template that computes its family's small
problem, against that problem; none may be flagged.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.builtin.catalog import TEMPLATES, render  # noqa: E402
from agents.builtin.recognise import analyse  # noqa: E402
from tools.cheat_tricks import STATIC_TRICKS, blocking  # noqa: E402
from tools.checks import static_findings  # noqa: E402
from tools.problem import load_problem  # noqa: E402


def main() -> None:
    # Each family's small problem: the one its templates are checked against.
    problems = {f: f for f in ("softmax", "layernorm", "matmul")}
    problems.update(reduce="sum_dim", elementwise="gelu_chain", epilogue="linear_relu")
    info = {f: load_problem(ROOT / "problems" / f"{name}_small.py").info for f, name in problems.items()}
    caught = tried = 0
    for path in sorted((ROOT / "tests" / "fixtures" / "cheats").glob("*.py")):
        source = path.read_text()
        trick = (ast.get_docstring(ast.parse(source)) or "").split(":")[0]
        if trick not in STATIC_TRICKS:
            continue  # a trick only running the candidate shows: bench/checks_dynamic.py counts it
        tried += 1
        caught += any(f.trick == trick for f in static_findings(source, info["softmax"]))
    flagged = checked = strict_only = 0

    def judge(source: str, family: str) -> None:
        nonlocal flagged, checked, strict_only
        found = static_findings(source, info[family])
        checked += 1
        flagged += bool(blocking(found, "relaxed"))
        strict_only += bool(found) and not blocking(found, "relaxed")  # reduced precision: rejected under strict

    for path in sorted((ROOT / "problems" / "candidates").glob("*.py")):
        judge(path.read_text(), path.stem.split("_")[0])
    skipped = []
    for name, template in TEMPLATES.items():
        shape = analyse(info[template.family])
        if shape is None or not template.fits(shape):
            skipped.append(name)  # it computes other problems of its family than the small one (a convolution's)
            continue
        spec = {"spec": shape.spec} if shape.spec else {}  # the problem's own expression, for those that render it
        for params in template.points():
            judge(render(name, {**params, **spec}, template.device), template.family)
    print(f"tricks caught: {caught} of {tried} fixtures")
    print(f"legitimate sources flagged (relaxed policy): {flagged} of {checked}")
    print(f"legitimate sources in reduced precision (rejected under strict only): {strict_only} of {checked}")
    print(f"templates not checked (their family's small problem is not theirs): {', '.join(skipped) or 'none'}")


if __name__ == "__main__":
    main()
