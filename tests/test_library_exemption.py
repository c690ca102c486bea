"""The library exemption: a heavy op + pointwise tail problem may leave its matmul / convolution to the library.

Where the reference is one aten.mm/addmm/bmm or aten.convolution followed by pointwise ops, a candidate may
run that heavy op through torch (cuBLAS / cuDNN) if every other op it runs in torch only allocates, copies or
re-views memory: the tail must be its own kernel. Everywhere else the heavy op stays a ``reference_op``. The
fixtures in ``tests/fixtures/epilogue/`` run in the real sandboxed worker on the CPU.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from agents.builtin.pointwise_trace import DIAGONAL, HANDLED, HEAVY, TRANSPOSES, VIEWS
from sandbox.evaluation import Evaluation, evaluate
from sandbox.local import LocalSandbox
from tests.conftest import FIXTURES, PROBLEMS
from tools.cheat_tricks import LAYOUT_OPS, POINTWISE_OPS, library_family
from tools.checks import static_findings
from tools.problem import ProblemInfo, load_problem
from tools.protocol import TimingConfig
from tools.runtime_checks import OpRecorder, library_note, op_findings

EPILOGUE = FIXTURES / "epilogue"
QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)
HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def problem(tmp_path: Path, name: str, ctor: str, forward: str, inputs: str, init: str = "[]") -> ProblemInfo:
    src = (
        HEAD + f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n{ctor}\n\n"
        f"    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n"
    )
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return load_problem(path).info


def info(name: str) -> ProblemInfo:
    return load_problem(PROBLEMS / f"{name}.py").info


# ------------------------------------------------------------------------------- which problems


def test_only_one_heavy_op_with_a_pointwise_tail_is_exempt(tmp_path: Path) -> None:
    linear = "        self.linear = nn.Linear(16, 8)"
    conv = "        self.conv = nn.Conv2d(3, 4, 3)"
    cases = {
        "linear_tail": (linear, "torch.relu(self.linear(x))", "[torch.randn(4, 16)]", "mm"),
        "conv_tail": (conv, "torch.tanh(self.conv(x)) * 2", "[torch.randn(2, 3, 8, 8)]", "convolution"),
        "linear_only": (linear, "self.linear(x)", "[torch.randn(4, 16)]", None),
        "linear_softmax": (linear, "torch.softmax(self.linear(x), 1)", "[torch.randn(4, 16)]", None),
        "linear_sum": (linear, "self.linear(x).relu().sum(1)", "[torch.randn(4, 16)]", None),
        "two_linears": (
            linear + "\n        self.out = nn.Linear(8, 8)",
            "self.out(torch.relu(self.linear(x)))",
            "[torch.randn(4, 16)]",
            None,
        ),
    }
    for name, (ctor, forward, inputs, family) in cases.items():
        assert library_family(problem(tmp_path, name, ctor, forward, inputs).aten_ops) == family, name
    assert library_family(info("linear_relu_small").aten_ops) == "mm"
    for plain in ("matmul_small", "softmax_small", "layernorm_small", "gelu_chain_small"):
        assert library_family(info(plain).aten_ops) is None, plain
    # The worker's recorder names ops without namespace or overload: the same answer.
    assert library_family({"t": 1, "addmm": 1, "relu_": 1}) == "mm"
    assert library_family({"addmm": 2, "relu": 1}) is None  # two products: not one heavy op + tail


def test_every_op_the_builtin_fuses_counts_as_pointwise_or_layout() -> None:
    # Whatever the builtin team recognises as an epilogue problem must get the exemption.
    fused = HANDLED - VIEWS - TRANSPOSES - HEAVY - DIAGONAL - {"log_sigmoid_forward"}
    assert not fused - POINTWISE_OPS, fused - POINTWISE_OPS
    assert not (VIEWS | TRANSPOSES | DIAGONAL) - LAYOUT_OPS  # diag_embed copies a vector into a matrix
    assert "log_sigmoid_forward" in POINTWISE_OPS


# ------------------------------------------------------------------------------------ static side


def test_static_checks_allow_the_library_call_only_for_a_tail_problem() -> None:
    source = (EPILOGUE / "library_linear_own_tail.py").read_text()
    assert static_findings(source, info("linear_relu_small")) == []
    cheat = (EPILOGUE / "library_matmul_no_tail.py").read_text()
    found = static_findings(cheat, info("matmul_small"))
    assert [f.trick for f in found] == ["reference_op"], found
    # The same F.linear call for the plain matmul problem is the reference's op again.
    assert "reference_op" in {f.trick for f in static_findings(source, info("matmul_small"))}


# ----------------------------------------------------------------------------------- dynamic side


def recorded(fn) -> OpRecorder:
    recorder = OpRecorder()
    with torch.no_grad(), recorder:
        fn()
    return recorder


def test_op_findings_read_the_ops_the_candidate_ran() -> None:
    x, w, b = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)
    own_tail = recorded(lambda: torch.nn.functional.linear(x, w, b).contiguous())
    torch_tail = recorded(lambda: torch.relu(torch.nn.functional.linear(x, w, b)))
    assert op_findings(own_tail, {"mm"}, False, "relaxed", library="mm") == []
    note = library_note(own_tail, "mm", torch.device("cpu"))
    assert note is not None and note.startswith("heavy op by the library: the CPU BLAS (aten.addmm")
    assert library_note(own_tail, "mm", torch.device("cuda")).startswith("heavy op by the library: cuBLAS")
    found = op_findings(torch_tail, {"mm"}, False, "relaxed", library="mm")
    assert len(found) == 1 and found[0].trick == "reference_op" and "aten.relu" in found[0].detail
    # Without the exemption the library call itself is the reference's op.
    assert [f.trick for f in op_findings(own_tail, {"mm"}, False, "relaxed")] == ["reference_op"]
    # A candidate that does not use the library may still use torch for pointwise work (the usual rule).
    assert op_findings(recorded(lambda: torch.relu(x)), {"mm"}, False, "relaxed", library="mm") == []
    assert library_note(recorded(lambda: torch.relu(x)), "mm", torch.device("cpu")) is None


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


def run(path: Path, sandbox: LocalSandbox, device: str = "cpu") -> Evaluation:
    """The fixture evaluated by the real harness (timed, so the whole worker runs) on its docstring's problem."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    name = re.search(r"^Problem: (\w+)", doc, re.MULTILINE).group(1)  # type: ignore[union-attr]
    return evaluate(
        load_problem(PROBLEMS / f"{name}.py"),
        path.read_text(),
        sandbox=sandbox,
        device=device,  # type: ignore[arg-type]
        available_bytes=8 << 30,
        candidate_name=path.name,
        references=("eager",),
        n_checks=2,
        timing=QUICK,
        timeout_s=300,
        with_roofline=False,
    )


def test_the_library_with_its_own_tail_is_accepted_and_says_so(sandbox: LocalSandbox) -> None:
    ev = run(EPILOGUE / "library_linear_own_tail.py", sandbox)
    assert ev.accepted, (ev.result.status, ev.result.reason, ev.anti_cheat)
    assert ev.result.reason.endswith("heavy op by the library: the CPU BLAS"), ev.result.reason
    assert any(w.startswith("heavy op by the library: the CPU BLAS (aten.addmm") for w in ev.warnings), ev.warnings


@pytest.mark.parametrize(
    "name", ["library_linear_torch_tail", "library_linear_half_torch_tail", "library_matmul_no_tail"]
)
def test_the_library_with_torch_doing_the_rest_is_rejected(name: str, sandbox: LocalSandbox) -> None:
    ev = run(EPILOGUE / f"{name}.py", sandbox)
    assert not ev.accepted and ev.result.status == "rejected", (ev.result.status, ev.result.reason)
    assert ev.result.reason.startswith("reference_op:"), ev.result.reason
    assert not any(w.startswith("heavy op by the library") for w in ev.warnings)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["library_linear_torch_tail", "library_matmul_no_tail"])
def test_the_library_with_torch_doing_the_rest_is_rejected_on_the_gpu(name: str, sandbox: LocalSandbox) -> None:
    ev = run(EPILOGUE / f"{name}.py", sandbox, "cuda")
    assert ev.result.status == "rejected" and ev.result.reason.startswith("reference_op:"), ev.result.reason
