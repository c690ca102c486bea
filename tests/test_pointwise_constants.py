"""Tensors the reference's forward makes itself (``torch.tensor(0.0, device=x.device)``, ``torch.full``,
``x.new_ones``, ``torch.zeros_like``, ...): the pointwise trace takes one holding a single finite number as a
constant of the expression, broadcast to its shape, and refuses any other factory with the reason.

On meta, ``torch.tensor(c, device=x.device)`` runs no aten op at all, so these also check the trace sees it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents import builtin
from agents.builtin import pointwise
from agents.builtin.templates_elementwise_expression import expression_text
from sandbox.local import LocalSandbox
from tests.test_builtin_elementwise import HEAD, check, simple
from tools.problem import load_problem

# forward(x) of an (8, 16) input -> the expression traced from it.
RECOGNISED = {
    "tensor_on_device": ("torch.max(x, torch.tensor(0.0, device=x.device))", "maximum(x, 0)"),
    "tensor_on_the_cpu": ("torch.min(x, torch.tensor(0.5))", "minimum(x, 0.5)"),
    "tensor_moved_to_the_device": ("x * torch.tensor([2.0] * 16).to(x.device)", "x * 2"),
    "tensor_with_dtype": ("torch.min(x, torch.tensor(-0.5, dtype=x.dtype, device=x.device))", "minimum(x, -0.5)"),
    "tensor_of_one_repeated_number": ("x * torch.tensor([[2.0] * 16], device=x.device)", "x * 2"),
    "as_tensor": ("x * torch.as_tensor(1.5, device=x.device)", "x * 1.5"),
    "scalar_tensor": ("torch.where(x > 0, x, torch.scalar_tensor(-1.0, device=x.device))", "where(gt(x, 0), x, -1)"),
    "full": ("x + torch.full((16,), 2.0, device=x.device)", "x + 2"),
    "full_computed_on": ("x + torch.full((16,), 2.0, device=x.device).view(1, 16) * 3", "x + (2 * 3)"),
    "expanded": ("x - torch.tensor(0.5, device=x.device).expand(8, 16)", "x - 0.5"),
    "ones": ("x - torch.ones(8, 16, device=x.device, dtype=torch.float32)", "x - 1"),
    "zeros": ("torch.maximum(x, torch.zeros((), device=x.device))", "maximum(x, 0)"),
    "new_tensor": ("x + x.new_tensor(3.0)", "x + 3"),
    "new_full": ("x + x.new_full((1, 16), -0.25)", "x + -0.25"),
    "new_ones": ("torch.min(x, x.new_ones(16))", "minimum(x, 1)"),
    "new_zeros": ("torch.where(x < 0, x.new_zeros(x.shape), x)", "where(lt(x, 0), 0, x)"),
    "ones_like": ("x + torch.ones_like(x)", "x + 1"),
    "zeros_like": ("torch.max(x, torch.zeros_like(x))", "maximum(x, 0)"),
    "full_like": ("x * torch.full_like(x, 0.25, device=x.device)", "x * 0.25"),
}


@pytest.mark.parametrize("name", sorted(RECOGNISED))
def test_constants_made_in_forward_are_constants_of_the_expression(name: str, tmp_path: Path) -> None:
    forward, expression = RECOGNISED[name]
    info = simple(tmp_path, name, forward)
    assert pointwise.explain(info) == "recognised"
    analysed = pointwise.analyse_pointwise(info)
    assert analysed is not None
    family, spec_json, _ = analysed
    spec = json.loads(spec_json)
    assert family == "elementwise" and spec["leaves"] == [{"kind": "input", "key": 0, "shape": [8, 16], "full": True}]
    assert expression_text(spec) == expression


REFUSED = {
    "several_numbers": ("x + torch.tensor([1.0, 2.0] * 8, device=x.device)", "not one repeated number"),
    "several_numbers_on_the_cpu": ("x + torch.tensor([1.0, 2.0] * 8).to(x.device)", "not one repeated number"),
    "nested_several_numbers": ("x + x.new_tensor([[1.0] * 16, [2.0] * 16] * 4)", "not one repeated number"),
    "infinite": ("torch.max(x, torch.tensor(float('inf'), device=x.device))", "not a finite real number"),
    "integer": ("torch.max(x, torch.tensor(0, device=x.device))", "a torch.int64 tensor made in forward"),
    "half": ("x + torch.tensor(1.0, dtype=torch.float16, device=x.device)", "a torch.float16 tensor"),
    "double": ("x + torch.ones(16, dtype=torch.float64, device=x.device)", "aten.ones computes in torch.float64"),
    "random": ("x + torch.randn(16, device=x.device)", "no elementwise handler for aten.randn"),
    "range": ("x + torch.arange(16, device=x.device)", "no elementwise handler for aten.arange"),
    "uninitialised": ("x + torch.empty(16, device=x.device)", "no elementwise handler for aten.empty"),
    "constant_alone": ("torch.zeros_like(x) + 1", "no operand of the output's shape"),
    "constant_sets_the_shape": ("x + torch.zeros(2, 8, 16, device=x.device)", "no operand of the output's shape"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_factories_are_refused_with_a_reason(name: str, tmp_path: Path) -> None:
    forward, why = REFUSED[name]
    info = simple(tmp_path, name, forward)
    assert pointwise.analyse_pointwise(info) is None
    assert why in pointwise.explain(info), pointwise.explain(info)


# The forms above in two problems whose CPU candidates the harness checks against the reference: a convolution
# whose tail reads constants (the KernelBench shape that was refused), and a chain of the rest. The convolution's
# forward makes its constants from Python data only: a reference that runs aten.full / ones / zeros ... is no
# heavy op + pointwise tail to the library exemption (``tools.cheat_tricks.library_family``).
CONV = '''
B = 2
H = 10
W = 12


class Model(nn.Module):
    """Conv2d, then bounds, a floor, a scale and a shift, all tensors made in forward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        x = torch.max(x, torch.tensor(-0.5, device=x.device))
        x = torch.min(x, torch.tensor(0.75))
        x = torch.where(x > 0.1, x, torch.scalar_tensor(-1.0, device=x.device))
        return x * x.new_tensor(2.0) + torch.tensor([[[0.5]]] * 8).to(x.device)


def get_inputs():
    return [torch.randn(B, 3, H, W)]


def get_init_inputs():
    return []
'''

CHAIN = '''
B = 6
D = 100


class Model(nn.Module):
    """A chain of every other factory of one number."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.maximum(x, x.new_zeros(x.shape)) * torch.full_like(x, 3.0) - torch.ones_like(x)
        y = torch.where(y > torch.zeros_like(x), y, y * torch.as_tensor(1.5, device=x.device))
        y = y + x.new_ones(x.shape[-1]) - x.new_full((1, x.shape[-1]), 0.25)
        y = y + torch.full((x.shape[-1],), 2.0, device=x.device) * 0.5
        return y * torch.ones(1, dtype=x.dtype, device=x.device) + torch.zeros((), device=x.device)


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
'''

# (family, the expression in full) of each.
EXPECTED = {
    "conv": (
        "epilogue",
        "(where(gt(minimum(maximum(conv2d(x), -0.5), 0.75), 0.1), minimum(maximum(conv2d(x), -0.5), 0.75), -1) * 2)"
        " + 0.5",
    ),
    "chain": (
        "elementwise",
        "((((where(gt(((maximum(x, 0) * 3) - 1), 0), ((maximum(x, 0) * 3) - 1), (((maximum(x, 0) * 3) - 1) * 1.5))"
        " + 1) - 0.25) + (2 * 0.5)) * 1) + 0",
    ),
}


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


@pytest.mark.parametrize("name, source", [("conv", CONV), ("chain", CHAIN)])
def test_the_candidates_compute_the_constants_on_the_cpu(
    name: str, source: str, tmp_path: Path, sandbox: LocalSandbox
) -> None:
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + source)
    info = load_problem(path).info
    shape = builtin.analyse(info)
    assert shape is not None, pointwise.explain(info)
    assert (shape.family, expression_text(json.loads(shape.spec), limit=1000)) == EXPECTED[name]
    ideas = builtin.propose(info, "cpu", 2, [], None)
    assert ideas
    for idea in ideas:
        check(path, idea.template, idea.params, sandbox, policy="strict")
