"""``epilogue_cuda_wgmma`` with the pointwise tail applied by the GEMM (``tail="gemm"``): which tails it takes, the
candidates it renders (compiled with NVRTC here), and their results on the GPU (marker ``gpu``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents import builtin
from agents.builtin.catalog import TEMPLATES
from agents.builtin.templates_elementwise_epilogue import tail_bias
from agents.builtin.templates_elementwise_gemm_tail import band_kinds
from sandbox.local import LocalSandbox
from tests.conftest import assert_cuda_renderings_compile
from tests.test_builtin_elementwise import HEAD, check
from tools.problem import load_problem

# A linear layer on a 3-D input whose tail reads every operand kind the GEMM can apply: the layer's bias and a
# parameter vector (one value per column), a one-element parameter and a number argument (one value for all).
# M = 4 * 64 = 256 rows (128 in the harness's second shape, which halves ``batch``), N = 256 columns and K = 256:
# the wgmma GEMM's tiles divide them.
FITS = '''
batch = 4


class Model(nn.Module):
    """Linear, a shift per column, a gain, tanh, less a number."""

    def __init__(self, features: int):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.shift = nn.Parameter(torch.randn(features))
        self.gain = nn.Parameter(torch.randn(1))

    def forward(self, x, t):
        return torch.tanh((self.proj(x) + self.shift) * self.gain) - t


def get_inputs():
    return [torch.randn(batch, 64, 256), 0.25]


def get_init_inputs():
    return [256]
'''

# Tails the GEMM cannot apply: a second full operand (a residual input), and a value per row.
RESIDUAL = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 256)

    def forward(self, x, r):
        return F.relu(self.proj(x)) + r


def get_inputs():
    return [torch.randn(128, 256), torch.randn(128, 256)]


def get_init_inputs():
    return []
"""
PER_ROW = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 256)

    def forward(self, x, s):
        return self.proj(x) * s


def get_inputs():
    return [torch.randn(128, 256), torch.randn(128, 1)]


def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gemm_tail_problems")
    out = {}
    for name, source in (("fits", FITS), ("residual", RESIDUAL), ("per_row", PER_ROW)):
        out[name] = folder / f"{name}.py"
        out[name].write_text(HEAD + source)
    return out


def spec_of(path: Path) -> str:
    shape = builtin.analyse(load_problem(path).info)
    assert shape is not None and shape.family == "epilogue" and shape.spec
    return shape.spec


def test_the_gemm_takes_tails_of_per_column_and_one_value_operands(problems: dict[str, Path]) -> None:
    spec = json.loads(spec_of(problems["fits"]))
    kinds = band_kinds(tail_bias(spec))
    assert kinds is not None and sorted(kinds) == ["column", "column", "scalar", "scalar"]
    ideas = builtin.propose(load_problem(problems["fits"]).info, "cuda", 8, [], None)
    in_gemm = [i for i in ideas if i.params.get("tail") == "gemm"]
    # The first idea: the tail in the 128x256 GEMM, the fastest point measured (the fused split is left to the search).
    assert ideas[0] is in_gemm[0] and len(in_gemm) == 1, [i.params for i in ideas]
    assert (in_gemm[0].params["bn"], in_gemm[0].params["fused"]) == (256, False)
    assert all("applied by the GEMM before it stores the output" in i.text for i in in_gemm)


@pytest.mark.parametrize("name", ["residual", "per_row"])
def test_other_tails_keep_their_own_kernel(name: str, problems: dict[str, Path]) -> None:
    spec = spec_of(problems[name])
    assert band_kinds(tail_bias(json.loads(spec))) is None
    t = TEMPLATES["epilogue_cuda_wgmma"]
    with pytest.raises(ValueError, match="invalid combination"):
        t.normalise({"tail": "gemm", "spec": spec})
    assert t.normalise({"spec": spec})["tail"] == "pass"
    ideas = builtin.propose(load_problem(problems[name]).info, "cuda", 8, [], None)
    assert not [i for i in ideas if i.params.get("tail") == "gemm"]


def test_with_the_tail_in_the_gemm_the_tail_kernel_s_parameters_are_irrelevant(problems: dict[str, Path]) -> None:
    t = TEMPLATES["epilogue_cuda_wgmma"]
    spec = spec_of(problems["fits"])
    point = t.normalise({"tail": "gemm", "block": 1024, "items": 8, "inplace": False, "spec": spec})
    assert (point["block"], point["items"], point["inplace"]) == (256, 2, True)


def gemm_tail_points(path: Path) -> list[tuple[str, dict]]:
    spec = spec_of(path)
    t = TEMPLATES["epilogue_cuda_wgmma"]
    raw = [
        {"tail": "gemm"},
        {"tail": "gemm", "fused": True},
        {"tail": "gemm", "fused": True, "stages": 2},
        {"tail": "gemm", "bn": 256, "stages": 2},
        {"tail": "gemm", "bn": 256, "stages": 2, "fused": True, "fast_math": True},
    ]
    return [("epilogue_cuda_wgmma", t.normalise({**p, "spec": spec})) for p in raw]


def test_gemm_tail_candidates_compile_with_nvrtc(problems: dict[str, Path]) -> None:
    points = gemm_tail_points(problems["fits"])
    sources = [(t, p, builtin.render(t, p, "cuda")) for t, p in points]
    for _, p, src in sources:
        assert "tail_apply" in src and "_launch(" not in src, p  # no tail kernel: the GEMM applies it
    assert_cuda_renderings_compile(sources)


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


@pytest.mark.gpu
def test_gemm_tail_candidates_are_correct_on_the_gpu(problems: dict[str, Path], sandbox: LocalSandbox) -> None:
    for template, params in gemm_tail_points(problems["fits"]):
        check(problems["fits"], template, params, sandbox)
