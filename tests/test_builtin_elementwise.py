"""The builtin "elementwise" and "epilogue" families: recognising a pointwise chain (alone, or after one
matmul / linear / convolution) from the reference's op trace, and the fused kernels rendered for it.

CPU candidates run for real in the sandbox (several input sets, the second-shape check and the anti-cheat
probes included); CUDA candidates are compiled with NVRTC (no GPU needed). The CPU's vectorisable math
functions are checked against float64 torch directly.
"""

from __future__ import annotations

import ast
import ctypes
import json
from pathlib import Path

import pytest
import torch

from agents import builtin
from agents.builtin import pointwise
from agents.builtin.catalog import TEMPLATES
from agents.builtin.seeds import seeds
from agents.builtin.templates_elementwise_epilogue import tail_bias
from agents.builtin.templates_elementwise_expression import expression_text
from agents.builtin.templates_elementwise_math import COMMON, CPU_MATH
from sandbox.evaluation import evaluate
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS, assert_cuda_renderings_compile
from tools.compile import build_c, load_c
from tools.problem import ProblemInfo, import_source, load_problem

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def write(tmp_path: Path, name: str, source: str) -> ProblemInfo:
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + source)
    return load_problem(path).info


def simple(
    tmp_path: Path, name: str, forward: str, inputs: str = "[torch.randn(8, 16)]", ctor: str = ""
) -> ProblemInfo:
    """A problem ``forward(self, x) -> forward`` with an optional constructor body."""
    body = ctor or "        pass"
    return write(
        tmp_path,
        name,
        f"\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n{body}\n\n"
        f"    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n",
    )


# The problems below exercise every op handler, broadcast operands of every kind and each heavy op form.
ZOO = '''
B = 6
D = 1000


class Model(nn.Module):
    """Every activation and pointwise op the elementwise family handles, summed."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x) + F.mish(x) + F.softplus(x) + F.softplus(x, 2.0, 5.0)
        b = F.elu(x, 0.7) + F.selu(x) + F.celu(x, 1.3) + F.leaky_relu(x, 0.05) + F.hardswish(x) + F.hardsigmoid(x)
        b = b + F.relu6(x * 4) + F.hardtanh(x, -0.5, 0.5) + torch.relu(x) + F.threshold(x, 0.1, -2.0)
        c = torch.sigmoid(x) + torch.tanh(x) + torch.erf(x) + F.logsigmoid(x) + F.softsign(x) + F.tanhshrink(x)
        c = c + F.hardshrink(x, 0.3) + F.softshrink(x, 0.3) + torch.tanh(x * 0.01) + torch.erf(x * 3)
        d = torch.exp(x * 0.5) + torch.log(x.abs() + 0.1) + torch.sqrt(x.abs()) + torch.rsqrt(x.abs() + 1)
        d = d + torch.expm1(x * 0.1) + torch.log1p(x.abs()) + x.abs() ** 1.5 + 2**x + torch.reciprocal(x.abs() + 1)
        d = d + torch.sin(x) + torch.cos(x) + torch.log2(x.abs() + 1) + torch.log10(x.abs() + 1) + torch.exp2(x)
        d = d + x.sign() + torch.floor(x * 3) + torch.round(x * 2) + torch.trunc(x * 3) + torch.ceil(x) - x**2
        e = torch.where(x > 0.2, x, -x) + torch.maximum(x, 0.1 * x) + torch.minimum(x, x * x)
        e = e + torch.clamp(x, min=-0.2) + torch.clamp(x, max=0.3) + x.masked_fill(x < -1, 0.5) + x / 3.0 + x / 4
        e = e + torch.lerp(x, x * x, 0.3) + torch.addcmul(x, x, x, value=0.5) + torch.addcdiv(x, x, x.abs() + 1)
        e = e + (x >= 0).float() * 2 + torch.logical_and(x > -0.5, x < 0.5) * x + torch.fmax(x, -x) - 1 / x.abs().add(1)
        return a + b + c + d + e


def get_inputs():
    return [torch.randn(B, D) * 2]


def get_init_inputs():
    return []
'''

BANDS = '''
B = 4
C = 3
H = 5
W = 7


class Model(nn.Module):
    """Two full inputs, a broadcast input, per-channel parameters, a buffer along the last dim."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels))
        self.scale = nn.Parameter(torch.randn(channels, 1, 1))
        self.register_buffer("shift", torch.randn(1, 1, width))

    def forward(self, x, y, z):
        s = torch.sigmoid(self.scale)
        out = torch.where(x > y, x * self.scale, y + self.bias.view(1, -1, 1, 1))
        return (out - self.shift) * s + z


def get_inputs():
    return [torch.randn(B, C, H, W), torch.randn(B, C, H, W), torch.randn(1, W)]


def get_init_inputs():
    return [C, W]
'''

CONV = '''
B = 2
H = 10
W = 12


class Model(nn.Module):
    """Conv2d (with its bias), a per-channel parameter, tanh and a scale."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        return torch.tanh(self.conv(x) + self.bias) * 0.5


def get_inputs():
    return [torch.randn(B, 3, H, W)]


def get_init_inputs():
    return []
'''

CONV_T = '''
B = 2
H = 6
W = 5


class Model(nn.Module):
    """ConvTranspose2d, then ReLU and a per-channel scale."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.gain = nn.Parameter(torch.rand(4, 1, 1) + 0.5)

    def forward(self, x):
        return torch.relu(self.up(x)) * self.gain


def get_inputs():
    return [torch.randn(B, 8, H, W)]


def get_init_inputs():
    return []
'''

LINEAR_3D = '''
B = 2
S = 16


class Model(nn.Module):
    """A bias-free Linear on a 3-D input, an extra bias parameter, SiLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)
        self.b = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return F.silu(self.proj(x) + self.b)


def get_inputs():
    return [torch.randn(B, S, 32)]


def get_init_inputs():
    return [32, 24]
'''

MATMUL = '''
M = 33
K = 20
N = 17


class Model(nn.Module):
    """torch.matmul of two inputs, then a leaky ReLU and a residual input."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b, r):
        return F.leaky_relu(torch.matmul(a, b), 0.1) + r


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N), torch.randn(M, N)]


def get_init_inputs():
    return []
'''

DIAGONAL = '''
N = 24
M = 40


class Model(nn.Module):
    """Matmuls by diagonal matrices: rows scaled by an input, columns by a parameter; a residual input."""

    def __init__(self, columns: int):
        super().__init__()
        self.d = nn.Parameter(torch.randn(columns))

    def forward(self, a, b):
        return torch.diag(a) @ b @ torch.diag(self.d) + b


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return [M]
'''

NUMBERS = '''
M = 24
N = 40


class Model(nn.Module):
    """Python numbers as forward arguments: a matrix times a float, less an int, through a ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, a, s, t):
        return torch.relu(a * s - t)


def get_inputs():
    return [torch.randn(M, N), 3.14, 1]


def get_init_inputs():
    return []
'''

PROBLEM_SOURCES = {
    "zoo": (ZOO, "elementwise"),
    "numbers": (NUMBERS, "elementwise"),
    "diagonal": (DIAGONAL, "elementwise"),
    "bands": (BANDS, "elementwise"),
    "conv_tail": (CONV, "epilogue"),
    "conv_t_tail": (CONV_T, "epilogue"),
    "linear3d_tail": (LINEAR_3D, "epilogue"),
    "matmul_tail": (MATMUL, "epilogue"),
}


def write_problems(folder: Path, sources: dict[str, tuple[str, str]]) -> dict[str, Path]:
    """Each (source, family) of ``sources`` as a problem file ``folder/<name>.py``, after the shared imports."""
    out = {}
    for name, (source, _) in sources.items():
        out[name] = folder / f"{name}.py"
        out[name].write_text(HEAD + source)
    return out


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = write_problems(tmp_path_factory.mktemp("pointwise_problems"), PROBLEM_SOURCES)
    out["gelu_chain_small"] = PROBLEMS / "gelu_chain_small.py"
    out["linear_relu_small"] = PROBLEMS / "linear_relu_small.py"
    return out


# ------------------------------------------------------------------------------------- recognise


@pytest.mark.parametrize("name", sorted(PROBLEM_SOURCES))
def test_recognise_the_chains(name: str, problems: dict[str, Path]) -> None:
    info = load_problem(problems[name]).info
    shape = builtin.analyse(info)
    assert shape is not None, pointwise.explain(info)
    assert shape.family == PROBLEM_SOURCES[name][1]
    spec = json.loads(shape.spec)
    assert shape.elements == torch.Size(spec["out_shape"]).numel() == info.outputs[0].nbytes // 4
    full = [leaf for leaf in spec["leaves"] if leaf["full"]]
    bands = {leaf["key"]: leaf["shape"] for leaf in spec["leaves"] if not leaf["full"]}
    if name == "bands":
        assert [leaf["key"] for leaf in full] == [0, 1]
        assert bands == {"scale": [3, 1, 1], "bias": [1, 3, 1, 1], "shift": [1, 1, 7], 2: [1, 7]}
        assert pointwise.band([1, 3, 1, 1], spec["out_shape"]) == (3, 35)
    if name == "conv_tail":
        assert spec["heavy"]["op"] == "conv" and spec["heavy"]["bias"] == "conv.bias"
        assert spec["heavy"]["padding"] == [1, 1] and bands == {"bias": [8, 1, 1]}
    if name == "linear3d_tail":
        assert spec["heavy"] == {"op": "linear", "x": 0, "weight": "proj.weight", "bias": None}
        assert (shape.m, shape.k, shape.n) == (32, 32, 24)
    if name == "matmul_tail":
        assert spec["heavy"]["a"] == ["input", 0] and spec["heavy"]["b"] == ["input", 1]
        assert [leaf["kind"] for leaf in full] == ["heavy", "input"]
    if name == "zoo":
        ops = {node[0] for node in spec["nodes"]}
        assert {"gelu", "mish", "elu", "log_sigmoid", "erf", "pow", "where", "fmax", "sign", "logical_and"} <= ops
        assert "aten.lerp.Scalar" in info.aten_ops  # spelled as add, mul and sub in the expression


def test_the_expression_reads_like_the_reference(problems: dict[str, Path]) -> None:
    spec = json.loads(builtin.analyse(load_problem(problems["gelu_chain_small"]).info).spec)
    assert expression_text(spec) == "clamp(((gelu_tanh(x) * 2) - 0.5), -1, 1)"
    spec = json.loads(builtin.analyse(load_problem(problems["linear_relu_small"]).info).spec)
    assert expression_text(spec) == "(relu(linear(x)) * 2) - 0.5"
    moved = tail_bias(spec)  # the linear's bias added by the tail kernel instead of the library
    assert expression_text(moved) == "(relu((linear(x) + linear.bias)) * 2) - 0.5"
    assert [leaf["shape"] for leaf in moved["leaves"] if not leaf["full"]] == [[1024]]
    # diag(a) @ b is a[:, None] * b (the input gets its unit dim in the candidate, whatever its length then).
    spec = json.loads(builtin.analyse(load_problem(problems["diagonal"]).info).spec)
    assert expression_text(spec) == "((x0 * x1) * d) + x1"
    assert [leaf.get("unsqueeze") for leaf in spec["leaves"] if leaf["kind"] == "input"] == [None, [1]]


X = "[torch.randn(8, 16)]"
REFUSED = {
    "softmax": ("torch.softmax(x, 1)", "", X, "no elementwise handler"),
    "sum": ("x.relu().sum(1)", "", X, "no elementwise handler"),
    "transpose": ("x.t() + 1", "", X, "transposed"),
    "identity": ("x.view(-1).view(8, 16)", "", X, "nothing to compute"),
    "dropout": ("F.dropout(x, 0.5, training=True)", "", X, "no elementwise handler"),
    "integer": ("(x * 4).long().float() + 1", "", X, "computes in torch.int64"),
    "computed_view": ("(self.b * 2).view(1, -1) + x", "        self.b = nn.Parameter(torch.randn(16))", X, "re-views"),
    "viewed_input": ("x.view(2, 4, 16) + self.p", "        self.p = nn.Parameter(torch.randn(4, 16))", X, "view"),
    "not_a_span": (
        "x + self.p",
        "        self.p = nn.Parameter(torch.randn(2, 1, 16))",
        "[torch.randn(2, 4, 16)]",
        "contiguous span",
    ),
    "buffer": (
        "x + self.tmp",
        "        self.register_buffer('tmp', torch.randn(16), persistent=False)",
        X,
        "neither an input, a parameter nor computed",
    ),
    "prologue": ("torch.matmul(x.relu(), self.w)", "        self.w = nn.Parameter(torch.randn(16, 4))", X, "prologue"),
    "no_tail": ("torch.matmul(x, self.w)", "        self.w = nn.Parameter(torch.randn(16, 4))", X, "no tail"),
    "inplace_param": ("self.w.mul_(2) + x", "        self.w = nn.Parameter(torch.randn(16))", X, "in place"),
    "diagonal_alone": ("torch.diag(x)", "", "[torch.randn(8)]", "nothing to compute"),
    "diagonal_added": ("torch.diag(x) + 1", "", "[torch.randn(8)]", "a diagonal matrix used other than"),
    "diagonal_offset": (
        "torch.diag(x, 1) @ self.w",
        "        self.w = nn.Parameter(torch.randn(9, 4))",
        "[torch.randn(8)]",
        "off the main diagonal",
    ),
    "diagonal_squared": ("torch.diag(x) @ torch.diag(x)", "", "[torch.randn(8)]", "two diagonal matrices"),
    "diagonal_of_matrix": ("torch.diag_embed(x) @ x", "", "[torch.randn(4, 4)]", "a 1-D input"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unknown_chains_are_refused_with_a_reason(name: str, tmp_path: Path) -> None:
    forward, ctor, inputs, why = REFUSED[name]
    info = simple(tmp_path, name, forward, inputs=inputs, ctor=ctor)
    assert pointwise.analyse_pointwise(info) is None
    assert why in pointwise.explain(info), pointwise.explain(info)
    shape = builtin.analyse(info)  # another family may take it (a plain softmax is one)
    if shape is None:
        for device in ("cpu", "cuda"):
            assert builtin.propose(info, device, 3, [], None) == []
    else:
        assert shape.family not in ("elementwise", "epilogue")


def test_number_forward_arguments_are_operands_unless_forward_branches_on_them(
    tmp_path: Path, problems: dict[str, Path]
) -> None:
    spec = json.loads(builtin.analyse(load_problem(problems["numbers"]).info).spec)
    assert spec["numbers"] == [1, 2] and expression_text(spec) == "relu(((x0 * x1) - x2))"

    def forward_of(name: str, body: str, inputs: str) -> ProblemInfo:
        return write(
            tmp_path,
            name,
            f"\nclass Model(nn.Module):\n    def forward(self, x, alpha):\n        return {body}\n\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n",
        )

    branches = forward_of("branches", "x * 2 if alpha > 0 else x", "[torch.randn(4, 4), 0.5]")
    flag = forward_of("flag", "x * alpha", "[torch.randn(4, 4), True]")
    for info in (branches, flag):
        assert builtin.analyse(info) is None, info.name
    assert "neither a tensor nor a number" in pointwise.explain(flag)


# ----------------------------------------------------------------------------------------- CUDA


def spread(shape: builtin.Shape) -> list[tuple[str, dict]]:
    """The family's CUDA templates: defaults, each parameter value once, and the seeds; with the spec."""
    points: dict[str, tuple[str, dict]] = {}
    for t in builtin.templates_for(shape.family, "cuda"):
        if not t.fits(shape):
            continue
        base = {**t.defaults(), "spec": shape.spec}
        for raw in [base] + [{**base, p.name: v} for p in t.params for v in p.values]:
            try:
                point = t.normalise(raw)
            except ValueError:  # a value that needs others changed with it (a GEMM's registers)
                continue
            points[t.name + json.dumps(point, sort_keys=True)] = (t.name, point)
    for name, params in seeds(shape, "cuda"):
        point = TEMPLATES[name].normalise({**params, "spec": shape.spec})
        points[name + json.dumps(point, sort_keys=True)] = (name, point)
    return list(points.values())


@pytest.mark.parametrize("name", ["gelu_chain_small", "linear_relu_small", *sorted(PROBLEM_SOURCES)])
def test_every_cuda_rendering_compiles_with_nvrtc(name: str, problems: dict[str, Path]) -> None:
    shape = builtin.analyse(load_problem(problems[name]).info)
    points = spread(shape)
    assert len(points) >= 12
    renderings = [(t, p, builtin.render(t, p, "cuda")) for t, p in points]
    assert_cuda_renderings_compile(renderings)
    if shape.family == "epilogue":
        for _, _, src in renderings:
            assert "F.linear(" in src or "F.conv" in src or "torch.matmul(" in src or "_linear_bf16x3(" in src


def test_fast_math_is_offered_only_where_it_changes_something(tmp_path: Path, problems: dict[str, Path]) -> None:
    plain = builtin.analyse(simple(tmp_path, "affine", "torch.clamp(x * 2 + 1, 0, 3)"))
    t = TEMPLATES["elementwise_cuda"]
    assert t.normalise({"fast_math": True, "spec": plain.spec})["fast_math"] is False
    gelu = builtin.analyse(load_problem(problems["gelu_chain_small"]).info)
    assert t.normalise({"fast_math": True, "spec": gelu.spec})["fast_math"] is True
    src = builtin.render("elementwise_cuda", {"fast_math": True, "spec": gelu.spec}, "cuda")
    assert "#define FAST_MATH 1" in src and "__expf" in src


def test_rendering_needs_the_problem_spec() -> None:
    with pytest.raises(ValueError, match="spec"):
        builtin.render("elementwise_cuda", {}, "cuda")
    with pytest.raises(ValueError, match="spec"):
        builtin.render("epilogue_cpu", {}, "cpu")


# ------------------------------------------------------------------------------------ CPU math

_MATH_C = (
    CPU_MATH
    + COMMON
    + r"""
void apply(int which, const float* x, float* y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        float r;
        switch (which) {
        case 0: r = k_exp(v); break;
        case 1: r = k_log(v); break;
        case 2: r = k_tanh(v); break;
        case 3: r = k_erf(v); break;
        case 4: r = k_expm1(v); break;
        case 5: r = k_log1p(v); break;
        case 6: r = ew_sigmoid(v); break;
        case 7: r = ew_gelu_tanh(v); break;
        case 8: r = ew_softplus(v, 1.0f, 20.0f); break;
        default: r = ew_log_sigmoid(v); break;
        }
        y[i] = r;
    }
}
"""
)


def test_the_cpu_math_functions_are_accurate() -> None:
    lib = load_c(_MATH_C, name="ew_math_check", flags=("-O2", "-march=native", "-fno-math-errno"))
    lib.apply.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    wide = torch.cat([torch.linspace(-120, 100, 20001), torch.randn(20000) * 3, torch.logspace(-40, 38, 2000)])
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-30, 1e-42, float("inf"), float("-inf"), float("nan")])
    x = torch.cat([wide, -wide, special]).float().contiguous()
    x64 = x.double()
    refs = {
        0: torch.exp(x64),
        1: torch.log(x64),
        2: torch.tanh(x64),
        3: torch.erf(x64),
        4: torch.expm1(x64),
        5: torch.log1p(x64),
        6: torch.sigmoid(x64),
        7: torch.nn.functional.gelu(x64, approximate="tanh"),
        8: torch.nn.functional.softplus(x64),
        9: torch.nn.functional.logsigmoid(x64),
    }
    for which, ref in refs.items():
        y = torch.empty_like(x)
        lib.apply(which, x.data_ptr(), y.data_ptr(), x.numel())
        exact = ref.float().double()  # what a correctly rounded fp32 result would be
        y64 = y.double()
        same_special = (y64.isnan() == exact.isnan()).all() and (y64[exact.isinf()] == exact[exact.isinf()]).all()
        assert same_special, which
        finite = exact.isfinite()
        err = (y64[finite] - exact[finite]).abs()
        bound = 4e-7 * exact[finite].abs() + 1e-7  # a few ulp, or 1e-7 absolute near zero
        worst = int((err - bound).argmax())
        assert bool((err <= bound).all()), (which, float(x[finite][worst]), float(y64[finite][worst]))


# ------------------------------------------------------------------------------ CPU, sandboxed


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


def check(problem_path: Path, template: str, params: dict, sandbox: LocalSandbox, policy: str = "relaxed") -> None:
    """The rendering of (template, params) is verified and accepted by the real harness, on its device (under the
    relaxed policy if ``policy`` is one the template's source cannot run under)."""
    if policy not in TEMPLATES[template].policies:
        policy = "relaxed"
    problem = load_problem(problem_path)
    device = TEMPLATES[template].device
    src = builtin.render(template, params, device)
    ev = evaluate(
        problem,
        src,
        sandbox=sandbox,
        device=device,  # type: ignore[arg-type]
        available_bytes=8 << 30,
        policy=policy,  # type: ignore[arg-type]
        references=("eager",),
        n_checks=2,
        time_candidate=False,
        with_roofline=False,
        timeout_s=300,
    )
    where = f"{template} { ({k: v for k, v in params.items() if k != 'spec'}) }"
    assert ev.result.status == "ok" and ev.accepted, f"{where}: {ev.result.reason} {ev.anti_cheat}\n{ev.result.details}"
    assert "second-shape check skipped" not in ev.result.details, where
    worst = ev.result.correctness.worst("max_abs_error")
    bound = 1e-4 if "strict" in TEMPLATES[template].policies else 1e-3  # bf16x3: ~2^-16 of each product
    if template == "epilogue_cuda_half":  # the fp16 result rounds each value by up to 2^-11 of it (about 1.4e-3
        bound = 5e-3  # on these problems emulated, beside the reference's own TF32 error)
    assert worst is not None and worst < bound, f"{where}: error {worst}"
    own_gemm = ("epilogue_cuda_bf16x3", "epilogue_cuda_wgmma")
    if TEMPLATES[template].family == "epilogue" and template not in own_gemm:
        assert any(w.startswith("heavy op by the library") for w in ev.warnings), ev.warnings


@pytest.mark.parametrize("name", ["gelu_chain_small", "linear_relu_small"])
def test_round_one_cpu_candidates_are_correct_in_the_sandbox(
    name: str, problems: dict[str, Path], sandbox: LocalSandbox
) -> None:
    ideas = builtin.propose(load_problem(problems[name]).info, "cpu", 8, [], None)
    assert len(ideas) >= 5
    for idea in ideas:
        check(problems[name], idea.template, idea.params, sandbox)


@pytest.mark.parametrize("name", sorted(PROBLEM_SOURCES))
def test_every_op_and_operand_kind_is_correct_on_the_cpu(
    name: str, problems: dict[str, Path], sandbox: LocalSandbox
) -> None:
    # The first two seeds: for an epilogue the bias in the tail and in the library, in place.
    ideas = builtin.propose(load_problem(problems[name]).info, "cpu", 2, [], None)
    for idea in ideas:
        check(problems[name], idea.template, idea.params, sandbox, policy="strict")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gelu_chain_small", "linear_relu_small", *sorted(PROBLEM_SOURCES)])
def test_round_one_cuda_candidates_are_correct_on_the_gpu(
    name: str, problems: dict[str, Path], sandbox: LocalSandbox
) -> None:
    shape = builtin.analyse(load_problem(problems[name]).info)
    ideas = builtin.propose(load_problem(problems[name]).info, "cuda", 6, [], None)
    points = [(i.template, i.params) for i in ideas]
    t = TEMPLATES[ideas[0].template]  # and the scalar kernel, a grid-stride loop and fast math together
    points.append((t.name, {"spec": shape.spec, "vec4": False, "grid": 1, "items": 8, "fast_math": True}))
    for template, params in points:
        check(problems[name], template, params, sandbox, policy="strict")


def test_the_candidate_is_for_the_problem_s_constructor(problems: dict[str, Path]) -> None:
    shape = builtin.analyse(load_problem(problems["linear_relu_small"]).info)
    src = builtin.render("epilogue_cpu", {"spec": shape.spec, "binding": "ctypes"}, "cpu")
    module = import_source(src, "epilogue_cpu_candidate.py", "candidate")
    model = module.ModelNew(256, 1024)
    assert sorted(model.state_dict()) == ["linear.bias", "linear.weight"]
    with pytest.raises(ValueError, match="generated for Model"):
        module.ModelNew(256, 512)


# -------------------------------------------------------------------------------------- search


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["gelu_chain_small", "linear_relu_small"])
def test_later_rounds_branch_from_the_parent_and_never_repeat(
    name: str, device: str, problems: dict[str, Path]
) -> None:
    info = load_problem(problems[name]).info
    tried: list[dict] = []
    seen: set[str] = set()
    parent = None
    for round_ in range(4):
        ideas = builtin.propose(info, device, 3, tried, parent)
        assert ideas and ideas == builtin.propose(info, device, 3, tried, parent)
        for i, idea in enumerate(ideas):
            assert idea.params["spec"] == builtin.analyse(info).spec
            assert idea.expected_gain and "pointwise op" in idea.expected_gain
            k = idea.template + json.dumps(idea.params, sort_keys=True)
            assert k not in seen
            seen.add(k)
            tried.append(
                {
                    "template": idea.template,
                    "params": idea.params,
                    "status": "ok",
                    "speedup_vs_best": 1.0 + 0.1 * round_ - 0.01 * i,
                    "pct_roofline": 10.0 + round_,
                }
            )
        best = max(tried, key=lambda r: r["speedup_vs_best"])
        parent = {"template": best["template"], "params": best["params"]}


# ------------------------------------------------------------------ CUDA kernels, emulated on the CPU

# The kernels use no shared memory, no barriers and no warp intrinsics, so running every (block, thread) in
# turn is exactly what the GPU computes: this checks the indexing (float4 path and its n % 4 tail, scalar
# path, ITEMS, grid-stride loops, broadcast operands) here; the GPU run itself is the lead's `gpu` tests.
_SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __global__
#define __launch_bounds__(n)
#define __restrict__
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
struct uint2 { unsigned x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct dim3 { unsigned x = 0, y = 0, z = 0; };
static dim3 blockIdx, threadIdx, gridDim;
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __fdividef(a, b) ((a) / (b))
"""


# The one line of PTX in the kernels (fp16 to fp32, for an fp16 heavy result), and its C++ for the emulation.
HALF_PTX = 'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));'
HALF_CPP = "{ _Float16 v; std::memcpy(&v, &h, 2); f = (float)v; }"


def cuda_source(src: str) -> str:
    """The ``CUDA_SRC`` literal of a rendered candidate."""
    return next(
        node.value.value
        for node in ast.parse(src).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CUDA_SRC"
    )


def _emulated(src: str, nf: int, nb: int, block: int, halves: frozenset[int] = frozenset()) -> ctypes.CDLL:
    """The candidate's CUDA source compiled as C++ with a driver per kernel: run_<kernel>(grid, args...).
    ``halves``: the full operands the kernel reads as fp16."""
    cuda = cuda_source(src)
    if halves:
        assert HALF_PTX in cuda
        cuda = cuda.replace(HALF_PTX, HALF_CPP)
    drivers = []
    for kernel, ctype in (
        ("ew_vec_i32", "unsigned int"),
        ("ew_scalar_i32", "unsigned int"),
        ("ew_vec_i64", "long long"),
    ):
        params = [f"const {'unsigned short' if k in halves else 'float'}* f{k}" for k in range(nf)]
        params += [f"const float* b{k}, {ctype} inner{k}, {ctype} size{k}" for k in range(nb)]
        names = [f"f{k}" for k in range(nf)] + [f"b{k}, inner{k}, size{k}" for k in range(nb)]
        drivers.append(
            f'extern "C" void run_{kernel}(unsigned grid, {", ".join(params)}, float* y, {ctype} n)\n{{\n'
            "    gridDim.x = grid;\n"
            "    for (unsigned b = 0; b < grid; ++b)\n"
            f"        for (unsigned t = 0; t < {block}; ++t) {{\n"
            "            blockIdx.x = b;\n"
            "            threadIdx.x = t;\n"
            f"            {kernel}({', '.join(names)}, y, n);\n"
            "        }\n}\n"
        )

    report = build_c(
        _SHIM + cuda + "\n".join(drivers), name="ew_emulated", lang="c++", flags=("-O1", "-fno-strict-aliasing")
    )
    assert report.ok, report.log
    return ctypes.CDLL(report.artifact)


def _run_emulated(
    lib: ctypes.CDLL, kernel: str, grid: int, full: list[torch.Tensor], bands: list, y: torch.Tensor
) -> None:
    c = ctypes.c_int64 if kernel.endswith("i64") else ctypes.c_uint32
    args: list = [ctypes.c_uint32(grid), *(ctypes.c_void_p(t.data_ptr()) for t in full)]
    for t, size, inner in bands:
        args += [ctypes.c_void_p(t.data_ptr()), c(inner), c(size)]
    getattr(lib, f"run_{kernel}")(*args, ctypes.c_void_p(y.data_ptr()), c(y.numel()))


@pytest.mark.parametrize("name", ["gelu_chain_small", "bands", "zoo"])
def test_the_cuda_kernels_compute_the_chain_when_emulated(name: str, problems: dict[str, Path]) -> None:
    problem = load_problem(problems[name])
    shape = builtin.analyse(problem.info)
    spec = json.loads(shape.spec)
    torch.manual_seed(0)
    if name == "gelu_chain_small":  # smaller, and not a multiple of 4: the float4 kernel's tail runs
        inputs = [torch.randn(37, 131)]
        spec["out_shape"] = [37, 131]
    else:
        inputs = problem.make_inputs("cpu", seed=3)
    model = problem.make_model("cpu", seed=0)
    with torch.no_grad():
        expected = model(*inputs)
    state = model.state_dict()
    full = [inputs[leaf["key"]].contiguous() for leaf in spec["leaves"] if leaf["full"]]
    bands = []
    for leaf in spec["leaves"]:
        if not leaf["full"]:
            t = inputs[leaf["key"]] if leaf["kind"] == "input" else state[leaf["key"]]
            size, inner = pointwise.band(leaf["shape"] if leaf["kind"] == "param" else t.shape, expected.shape)
            bands.append((t.contiguous(), size, inner))
    for params in ({"block": 128, "items": 2}, {"block": 256, "items": 1, "fast_math": True}):
        src = builtin.render("elementwise_cuda", {**params, "spec": shape.spec}, "cuda")
        lib = _emulated(src, len(full), len(bands), params["block"])
        n = expected.numel()
        for kernel, per_thread, grid in (("ew_vec_i32", 4, None), ("ew_scalar_i32", 1, None), ("ew_vec_i64", 4, 3)):
            cover = -(-n // (params["block"] * params["items"] * per_thread))
            y = torch.full_like(expected, float("nan"))
            _run_emulated(lib, kernel, grid or cover, full, bands, y)  # grid 3: a grid-stride loop
            torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5, msg=lambda m, k=kernel: f"{k}: {m}")


def test_the_epilogue_kernel_works_in_place_when_emulated(problems: dict[str, Path]) -> None:
    problem = load_problem(problems["linear_relu_small"])
    shape = builtin.analyse(problem.info)
    model = problem.make_model("cpu", seed=0)
    (x,) = problem.make_inputs("cpu", seed=1)
    with torch.no_grad():
        expected = model(x)
        h = torch.nn.functional.linear(x, model.linear.weight, None)  # bias in the tail: a broadcast operand
    src = builtin.render("epilogue_cuda", {"spec": shape.spec, "bias": "tail", "inplace": True}, "cuda")
    assert "#define INPLACE 1" in src
    lib = _emulated(src, 1, 1, 256)
    bias = (model.linear.bias.detach().contiguous(), 1024, 1)
    _run_emulated(lib, "ew_vec_i32", 64, [h], [bias], h)  # out is h: the tail overwrites the product
    torch.testing.assert_close(h, expected, atol=1e-5, rtol=1e-5)
