"""The static anti-cheat checks: every cheat fixture is named for its trick, no legitimate kernel is flagged.

Each file in ``tests/fixtures/cheats/`` is a plausible ``ModelNew`` for ``problems/softmax_small.py``
whose docstring starts with the trick it uses (``side_stream: ...``) and whose offending line ends in a
``# cheat`` comment (``// cheat`` in C source). The legitimate sources are the reference candidates in
``problems/candidates/`` and the builtin team's renderings of every template.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.builtin import analyse
from agents.builtin.catalog import TEMPLATES, render
from agents.critic import Critic
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tools.cheat_tricks import DYNAMIC_ONLY_TRICKS, STATIC_TRICKS
from tools.checks import TRICKS, Finding, blocking, static_findings
from tools.problem import ProblemInfo, TensorSpec, load_problem

CHEATS = sorted((FIXTURES / "cheats").glob("*.py"))
FAMILY_PROBLEM = {"softmax": "softmax_small.py", "layernorm": "layernorm_small.py", "matmul": "matmul_small.py"}
FAMILY_PROBLEM |= {"elementwise": "gelu_chain_small.py", "epilogue": "linear_relu_small.py"}
FAMILY_PROBLEM |= {"reduce": "sum_dim_small.py"}
# Templates for one kind of problem of their family: a problem of that kind (keyed by the template's name).
FAMILY_PROBLEM |= {"epilogue_cuda_half": "suite/conv2d_scale_clamp_64x32x128x128.py"}  # convolutions only
# Templates that compute on TF32 tensor cores: flagged as a precision downgrade, which only the strict policy blocks.
LOW_PRECISION_TEMPLATES = {"matmul_cuda_mma", "matmul_cuda_bf16x3", "epilogue_cuda_bf16x3"}  # relaxed-only sources
LOW_PRECISION_TEMPLATES |= {"matmul_cuda_wgmma", "epilogue_cuda_wgmma", "epilogue_cuda_half"}
_INFO: dict[str, ProblemInfo] = {}


def info(key: str) -> ProblemInfo:
    """The problem of a family, or of a template that computes one kind of its family's problems."""
    if key not in _INFO:
        _INFO[key] = load_problem(str(PROBLEMS / FAMILY_PROBLEM[key])).info
    return _INFO[key]


def template_info(name: str) -> ProblemInfo:
    return info(name if name in FAMILY_PROBLEM else TEMPLATES[name].family)


def expected(path: Path) -> tuple[str, int]:
    source = path.read_text()
    trick = (ast.get_docstring(ast.parse(source)) or "").split(":")[0]
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.rstrip().endswith(("# cheat", "// cheat")))
    return trick, line


def render_point(name: str, params: dict) -> str:
    t = TEMPLATES[name]
    extras = {"eps": 1e-5} if "eps" in t.extras else {}
    if "spec" in t.extras:  # a template that renders the problem's own expression: that problem's facts
        extras |= {k: v for k, v in analyse(template_info(name)).extras().items() if k in t.extras}
    return render(name, {**params, **extras}, t.device)


def test_there_is_a_fixture_for_every_trick() -> None:
    assert {expected(p)[0] for p in CHEATS} == set(TRICKS)


STATIC_CHEATS = [p for p in CHEATS if expected(p)[0] in STATIC_TRICKS]


@pytest.mark.parametrize("path", STATIC_CHEATS, ids=lambda p: p.stem)
def test_cheat_is_flagged_with_its_trick_at_its_line(path: Path) -> None:
    trick, line = expected(path)
    findings = static_findings(path.read_text(), info("softmax"))
    assert any(f.trick == trick for f in findings), findings
    assert line in {f.line for f in findings if f.trick == trick}, findings
    if trick == "precision_downgrade":
        assert all(f.policy_dependent for f in findings if f.trick == trick)
        assert not blocking(findings, "relaxed") and blocking(findings, "strict")
    else:
        assert blocking(findings, "relaxed")


@pytest.mark.parametrize("path", [p for p in CHEATS if expected(p)[0] in DYNAMIC_ONLY_TRICKS], ids=lambda p: p.stem)
def test_dynamic_only_tricks_pass_the_static_checks(path: Path) -> None:
    # These leave nothing to see in the source: tests/test_runtime_checks.py catches them in the worker.
    assert static_findings(path.read_text(), info("softmax")) == []


@pytest.mark.parametrize("path", sorted(CANDIDATES.glob("*.py")), ids=lambda p: p.stem)
def test_reference_candidates_are_clean(path: Path) -> None:
    assert static_findings(path.read_text(), info(path.stem.split("_")[0])) == []


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_builtin_renderings_are_clean(name: str) -> None:
    t = TEMPLATES[name]
    for params in [*itertools.islice(t.points(), 0, None, 25), t.defaults()]:  # every 25th point of the space
        findings = static_findings(render_point(name, params), template_info(name))
        if name in LOW_PRECISION_TEMPLATES:
            assert findings and {f.trick for f in findings} == {"precision_downgrade"}, params
            assert not blocking(findings, "relaxed") and blocking(findings, "strict"), params
        else:
            assert findings == [], params


def test_legitimate_patterns_pass() -> None:
    source = '''
import ctypes
import cupy
import torch
from torch import nn
from tools.compile import load_c

C_SRC = r"""
#include <omp.h>
void f(const float* x, float* y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; ++i) y[i] = x[i];
}
"""
_lib = load_c(C_SRC, name="copy")
_KERNELS = {}


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _lib.f(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), x.numel())
        kernel = _KERNELS.setdefault((x.dtype, x.shape[-1]), None)
        with cupy.cuda.Stream.from_external(torch.cuda.current_stream()):
            pass
        torch.cuda.synchronize()
        return y
'''
    assert static_findings(source, info("softmax")) == []


def test_half_is_not_a_downgrade_for_a_half_problem() -> None:
    source = "import torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
    source += "        return x.half().to(torch.float16)\n"
    spec = TensorSpec(shape=[2, 2], dtype="float16", nbytes=8)
    half = info("softmax").model_copy(update={"inputs": [spec], "outputs": [spec]})
    assert static_findings(source, half) == []
    assert {f.trick for f in static_findings(source, info("softmax"))} == {"precision_downgrade"}


def test_the_heavy_op_depends_on_the_problem() -> None:
    source = "import torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n"
    source += "        return torch.softmax(A @ B, 1)\n"
    assert [f.trick for f in static_findings(source, info("matmul"))] == ["reference_op"]
    assert [f.trick for f in static_findings(source, info("softmax"))] == ["reference_op"]
    assert static_findings(source, info("layernorm")) == []


def test_the_critic_rejects_a_cheat_and_names_the_trick() -> None:
    ctx = SimpleNamespace(problem=SimpleNamespace(info=info("softmax")), settings=SimpleNamespace(policy="relaxed"))
    base = {"id": "c1-0", "status": "ok", "reason": "correct", "speedup_vs_best": 3.0}
    background = FIXTURES / "cheats" / "thread_background.py"
    verdict, reason = Critic().judge({**base, "source": background.read_text()}, ctx)  # type: ignore[arg-type]
    # The line that starts the thread: importing threading alone starts nothing.
    assert verdict == "rejected" and reason.startswith(f"anti-cheat: thread at line {expected(background)[1]}:"), reason
    clean = (CANDIDATES / "softmax_cpu.py").read_text()
    assert Critic().judge({**base, "source": clean}, ctx)[0] == "accepted"  # type: ignore[arg-type]
    half = (FIXTURES / "cheats" / "precision_downgrade_half.py").read_text()
    assert Critic().judge({**base, "source": half}, ctx)[0] == "accepted"  # type: ignore[arg-type]
    strict = SimpleNamespace(problem=ctx.problem, settings=SimpleNamespace(policy="strict"))
    verdict, reason = Critic().judge({**base, "source": half}, strict)  # type: ignore[arg-type]
    assert verdict == "rejected" and "precision_downgrade at line 9" in reason


@pytest.mark.parametrize(("patience", "stop"), [(2, "no improvement for 2 rounds"), (3, None)])
def test_the_critic_stops_after_patience_rounds_without_a_better_candidate(patience: int, stop: str | None) -> None:
    from graphs.config import RunConfig

    settings = RunConfig(problem="p.py", rounds=5, patience=patience)
    ctx = SimpleNamespace(problem=SimpleNamespace(info=info("softmax")), settings=settings)
    judged = {"status": "ok", "verdict": "accepted", "round": 1}
    best = {**judged, "id": "c1-0", "speedup_vs_best": 1.5}
    slower = {**judged, "id": "c2-0", "speedup_vs_best": 1.2, "round": 2}
    state = {"round": 2, "candidates": [best, slower], "best_id": "c1-0", "rounds_without_improvement": 1}
    update = Critic()(state, ctx)  # type: ignore[arg-type]
    assert update["best_id"] == "c1-0" and update["rounds_without_improvement"] == 2
    assert update.get("stop_reason") == stop


def test_finding_reads_as_the_critic_reason() -> None:
    assert str(Finding("thread", 3, "imports threading")) == "thread at line 3: imports threading"
