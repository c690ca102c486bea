"""Routes to the worker's own modules by another spelling than ``sys.modules`` (issue 37).

Each fixture in ``tests/fixtures/module_routes/`` is a ``ModelNew`` for ``problems/softmax_small.py`` that
returns a wrong answer and, at import, reaches ``tools.correctness`` in the worker by one route (``os.sys``,
``importlib.import_module("sys")``, ``getattr(os, "sys")``, ...) and replaces its comparison with one that
passes anything. Its docstring names the trick and says the route; the line that takes the route ends in
``# cheat``. The static checks must name the trick at that line, so ``evaluate`` rejects it before anything
runs; run anyway, the worker must see the replaced comparison (which also proves the route is real).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sandbox.evaluation import Evaluation, evaluate
from sandbox.local import LocalSandbox
from tests.conftest import FIXTURES, PROBLEMS
from tools.checks import static_findings
from tools.problem import Problem, load_problem
from tools.protocol import TimingConfig

ROUTES = sorted((FIXTURES / "module_routes").glob("*.py"))
QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)
SANDBOX = LocalSandbox()


def problem() -> Problem:
    return load_problem(PROBLEMS / "softmax_small.py")


def expected(path: Path) -> tuple[str, int]:
    source = path.read_text()
    trick = (ast.get_docstring(ast.parse(source)) or "").split(":")[0]
    return trick, next(i for i, text in enumerate(source.splitlines(), 1) if text.rstrip().endswith("# cheat"))


def run(path: Path, *, static_precheck: bool) -> Evaluation:
    return evaluate(
        problem(),
        path.read_text(),
        sandbox=SANDBOX,
        device="cpu",
        available_bytes=8 << 30,
        candidate_name=path.name,
        references=("eager",),
        n_checks=2,
        timing=QUICK,
        timeout_s=120,
        with_roofline=False,
        static_precheck=static_precheck,
    )


def test_there_are_route_fixtures() -> None:
    # dynamic_code: a route through a callable the checks cannot follow (getattr handed to functools.reduce)
    assert len(ROUTES) >= 8 and all(expected(p)[0] in ("frame_inspection", "dynamic_code") for p in ROUTES)


@pytest.mark.parametrize("path", ROUTES, ids=lambda p: p.stem)
def test_route_is_flagged_at_its_line(path: Path) -> None:
    trick, line = expected(path)
    findings = static_findings(path.read_text(), problem().info)
    assert line in {f.line for f in findings if f.trick == trick}, findings


@pytest.mark.parametrize("path", ROUTES, ids=lambda p: p.stem)
def test_route_is_rejected_before_it_runs(path: Path) -> None:
    ev = run(path, static_precheck=True)
    assert not ev.accepted and ev.result.status == "rejected", ev.result
    assert ev.rejected_unrun and ev.result.exit_code is None and ev.result.phases == {}, ev.result  # no worker ran
    assert any(f.startswith(f"{expected(path)[0]} at line {expected(path)[1]}:") for f in ev.anti_cheat), ev.anti_cheat


@pytest.mark.parametrize("path", ROUTES, ids=lambda p: p.stem)
def test_the_worker_sees_the_replaced_comparison(path: Path) -> None:
    # Run anyway: the fixture really reaches tools.correctness (else its zeros would be merely incorrect), and
    # the worker's snapshot of the harness names the replaced function.
    ev = run(path, static_precheck=False)
    assert not ev.accepted and ev.result.status == "rejected", ev.result
    assert "timer_patch" in {f.trick for f in ev.result.findings if f.blocking}, ev.result.findings


@pytest.mark.parametrize(
    "source",
    [
        "from sys import *\nm = modules",
        "from os import sys\nm = sys.modules",
        "import os\nm = [os][0].sys.modules",
        "import os\nimport builtins\nm = builtins.getattr(os, 'sys').modules",
        "import os\nm = vars(os)['sys'].modules",
        "s = globals()['sys']",
        "import sys\ns = [sys][0]",
        "import typing\nm = typing.sys.modules",
        "import importlib\nimp = importlib.import_module\nm = imp('sys').modules",
        "import os\nm = os.sys.modules.get('tools.correctness')",
        "import os\nos.sys.modules['tools.correctness'] = None",
    ],
)
def test_other_spellings_of_a_route_are_flagged(source: str) -> None:
    assert "frame_inspection" in {f.trick for f in static_findings(source, problem().info)}, source


def test_modules_reached_by_their_own_import_are_not_routes() -> None:
    # The legitimate spellings the builtin templates use: a C extension loaded through importlib.util, sys.stderr.
    source = (
        "import importlib.util\nimport os\nimport sys\n\n"
        "spec = importlib.util.spec_from_file_location('ext', os.path.join('a', 'b.so'))\n"
        "print('built', file=sys.stderr)\n"
    )
    assert static_findings(source, problem().info) == []
