"""Count what the static anti-cheat checks catch and what they wrongly flag.

    python bench/checks_static.py

Tricks: every fixture in tests/fixtures/cheats/ (one trick each, named first in its docstring) whose trick
shows in source must be flagged with that trick. Legitimate sources: the hand-written candidates in
problems/candidates/ and every valid parameter point of every builtin template, each against its
family's small problem; none may be flagged.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.builtin.catalog import TEMPLATES, render  # noqa: E402
from tools.cheat_tricks import STATIC_TRICKS  # noqa: E402
from tools.checks import static_findings  # noqa: E402
from tools.problem import load_problem  # noqa: E402


def main() -> None:
    info = {f: load_problem(ROOT / "problems" / f"{f}_small.py").info for f in ("softmax", "layernorm", "matmul")}
    caught = tried = 0
    for path in sorted((ROOT / "tests" / "fixtures" / "cheats").glob("*.py")):
        source = path.read_text()
        trick = (ast.get_docstring(ast.parse(source)) or "").split(":")[0]
        if trick not in STATIC_TRICKS:
            continue  # a trick only running the candidate shows: bench/checks_dynamic.py counts it
        tried += 1
        caught += any(f.trick == trick for f in static_findings(source, info["softmax"]))
    flagged = checked = 0
    for path in sorted((ROOT / "problems" / "candidates").glob("*.py")):
        checked += 1
        flagged += bool(static_findings(path.read_text(), info[path.stem.split("_")[0]]))
    for name, template in TEMPLATES.items():
        for params in template.points():
            checked += 1
            flagged += bool(static_findings(render(name, params, template.device), info[template.family]))
    print(f"tricks caught: {caught} of {tried} fixtures")
    print(f"legitimate sources flagged: {flagged} of {checked}")


if __name__ == "__main__":
    main()
