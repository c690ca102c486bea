"""The builtin catalog's reductions over one dim, log-softmax, RMSNorm and L1 / L2 normalisation.

Recognition (and refusal of what the templates do not compute), proposals that only use templates fitting the
problem's variant, NVRTC compiles of every CUDA rendering, and the CPU twins for real: in process against torch
on tie-heavy, NaN and -inf inputs (argmax / argmin must give torch's first index), and in the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agents import builtin
from agents.builtin.catalog import TEMPLATES
from agents.builtin.recognise_reduce import NORMS, split_dims
from agents.builtin.seeds import seeds
from sandbox.evaluation import evaluate
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS, assert_cuda_renderings_compile
from tools.problem import ProblemInfo, import_source, load_problem
from tools.protocol import TimingConfig

QUICK = TimingConfig(min_trials=20, min_seconds=0.1)
OPS = ("sum", "mean", "max", "min", "argmax", "argmin")


def write(
    tmp_path: Path, name: str, forward: str, inputs: str, init: str = "[]", ctor: str = "", body: str = ""
) -> Path:
    """A KernelBench-style problem file: ``forward`` returns the expression; ``body`` adds constructor lines."""
    src = (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self{', ' + ctor if ctor else ''}):\n        super().__init__()\n{body}"
        f"\n    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n"
    )
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return path


def info_of(tmp_path: Path, name: str, forward: str, inputs: str = "[torch.randn(4, 6, 5)]", **kw: str) -> ProblemInfo:
    return load_problem(write(tmp_path, name, forward, inputs, **kw)).info


def spec_of(shape: builtin.Shape) -> dict[str, Any]:
    return json.loads(shape.spec)


# ------------------------------------------------------------------------------------- recognise

REDUCTIONS = {
    # forward: (op, outer, reduced, inner, dims, keepdim)
    "torch.sum(x, dim=1)": ("sum", 4, 6, 5, [1], False),
    "x.sum(dim=-1, keepdim=True)": ("sum", 24, 5, 1, [-1], True),
    "x.sum()": ("sum", 1, 120, 1, None, False),
    "x.sum(dim=(1, 2))": ("sum", 4, 30, 1, [1, 2], False),
    "torch.mean(x, dim=1)": ("mean", 4, 6, 5, [1], False),
    "torch.max(x, dim=1)[0]": ("max", 4, 6, 5, [1], False),
    "torch.min(x, dim=2, keepdim=True).values": ("min", 24, 5, 1, [2], True),
    "torch.amax(x, dim=(0, 1), keepdim=True)": ("max", 1, 24, 5, [0, 1], True),
    "torch.argmax(x, dim=2)": ("argmax", 24, 5, 1, [2], False),
    "torch.argmin(x, dim=0, keepdim=True)": ("argmin", 1, 4, 30, [0], True),
    "torch.argmin(x)": ("argmin", 1, 120, 1, None, False),
}


@pytest.mark.parametrize("forward", sorted(REDUCTIONS))
def test_recognise_reductions(forward: str, tmp_path: Path) -> None:
    shape = builtin.analyse(info_of(tmp_path, "r", forward))
    op, outer, reduced, inner, dims, keepdim = REDUCTIONS[forward]
    assert shape is not None and shape.family == "reduce"
    assert (shape.op, shape.rows, shape.cols, shape.inner) == (op, outer, reduced, inner)
    assert spec_of(shape) == {"dims": dims, "keepdim": keepdim, "strided": inner > 1}
    assert shape.elements == 120


REFUSED = {
    "sum over dims that are not contiguous": "x.sum(dim=(0, 2))",
    "sum accumulated in another dtype": "x.sum(dim=1, dtype=torch.float64)",
    "a product": "x.prod(dim=1)",
    "a sum followed by another op": "x.sum(dim=1) * 2",
    "max.dim's indices (tie rule unspecified)": "torch.max(x, dim=1)[1]",
    "max.dim's values and indices": "torch.max(x, dim=1)",
    "RMS with x * sqrt instead of x / sqrt": "x * torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
    "RMS of cubes": "x / torch.sqrt(torch.mean(x ** 3, dim=1, keepdim=True) + 1e-5)",
    "RMS minus eps": "x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) - 1e-5)",
    "RMS of another tensor's squares": "x / torch.sqrt(torch.mean((x + 1) ** 2, dim=1, keepdim=True) + 1e-5)",
    "log-softmax over the first dim": "torch.log_softmax(x, dim=0)",
}


@pytest.mark.parametrize("why", sorted(REFUSED))
def test_unknown_variants_are_refused(why: str, tmp_path: Path) -> None:
    problem = info_of(tmp_path, "refused", REFUSED[why])
    assert builtin.analyse(problem) is None, why
    for device in ("cpu", "cuda"):
        assert builtin.propose(problem, device, 4, [], None) == []


def test_refused_inputs_and_weights(tmp_path: Path) -> None:
    ints = info_of(tmp_path, "ints", "torch.sum(x, dim=1)", "[torch.randint(0, 5, (4, 6))]")
    half = info_of(tmp_path, "half", "torch.argmax(x, dim=1)", "[torch.randn(4, 6).half()]")
    # A weight over a strided normalised dim: the strided template has no weight.
    strided_weight = info_of(
        tmp_path,
        "strided_weight",
        "x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5) * self.w",
        init="[6]",
        ctor="d",
        body="        self.w = nn.Parameter(torch.randn(d, 1))\n",
    )
    # A parameter the computation never uses.
    unused = info_of(tmp_path, "unused", "torch.sum(x, dim=1)", body="        self.w = nn.Parameter(torch.randn(3))\n")
    for problem in (ints, half, strided_weight, unused):
        assert builtin.analyse(problem) is None, problem.name


def test_recognise_log_softmax(tmp_path: Path) -> None:
    shape = builtin.analyse(info_of(tmp_path, "lsm", "torch.log_softmax(x, dim=-1)"))
    assert (shape.family, shape.op, shape.rows, shape.cols) == ("softmax", "log_softmax", 24, 5)
    plain = builtin.analyse(info_of(tmp_path, "sm", "torch.softmax(x, dim=-1)"))
    assert (plain.family, plain.op) == ("softmax", "")


def test_recognise_rmsnorm_written_by_hand_and_by_torch(tmp_path: Path) -> None:
    kb = builtin.analyse(load_problem(PROBLEMS / "rmsnorm_small.py").info)
    assert (kb.family, kb.op, kb.rows, kb.cols, kb.inner, kb.eps) == ("layernorm", "rms", 8, 32, 48 * 64, 1e-5)
    assert spec_of(kb) == {"dims": [1], "strided": True, "weight": None, "wshape": []}

    last = builtin.analyse(info_of(tmp_path, "last", "x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6)"))
    assert (last.rows, last.cols, last.inner, last.eps) == (24, 5, 1, 1e-6)

    functional = builtin.analyse(info_of(tmp_path, "functional", "F.rms_norm(x, (6, 5))"))
    assert (functional.rows, functional.cols, functional.inner) == (4, 30, 1)
    assert functional.eps == torch.finfo(torch.float32).eps  # rms_norm's default eps

    module = builtin.analyse(
        info_of(tmp_path, "module", "self.norm(x)", init="[5]", ctor="d", body="        self.norm = nn.RMSNorm(d)\n")
    )
    assert (module.op, module.cols, module.inner) == ("rms", 5, 1)
    assert spec_of(module)["weight"] == "norm.weight" and spec_of(module)["wshape"] == [5]

    llama = builtin.analyse(
        info_of(
            tmp_path,
            "llama",
            "self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))",
            init="[5]",
            ctor="d",
            body="        self.weight = nn.Parameter(torch.randn(d))\n",
        )
    )
    assert spec_of(llama)["weight"] == "weight" and llama.eps == 1e-6


NORMALISATIONS = {
    # forward (x of shape (4, 6, 5)): (op, outer, reduced, inner, dims)
    "x / torch.norm(x, p=2, dim=1, keepdim=True)": ("l2", 4, 6, 5, [1]),
    "x / torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)": ("l2", 4, 30, 1, [1, 2]),
    "x / torch.norm(x, p='fro')": ("l2", 1, 120, 1, None),  # the Frobenius norm: every dim, a 0-d divisor
    "x / torch.sum(torch.abs(x), dim=-1, keepdim=True)": ("l1", 24, 5, 1, [-1]),
    "x / torch.mean(torch.abs(x), dim=1, keepdim=True)": ("l1_mean", 4, 6, 5, [1]),
}
NOT_NORMALISATIONS = {
    "an eps added to the norm": "x / (torch.norm(x, dim=1, keepdim=True) + 1e-6)",
    "the L1 norm through torch.norm (another p)": "x / torch.norm(x, p=1, dim=1, keepdim=True)",
    "a divisor that broadcasts over other dims": "x / torch.sum(torch.abs(x), dim=2)",  # on (5, 5, 5)
    "the norm divided by x": "torch.norm(x, dim=1, keepdim=True) / x",
    "abs of something else than x": "x / torch.sum(torch.abs(x * 2), dim=1, keepdim=True)",
}


@pytest.mark.parametrize("forward", sorted(NORMALISATIONS))
def test_recognise_l1_and_l2_normalisation(forward: str, tmp_path: Path) -> None:
    shape = builtin.analyse(info_of(tmp_path, "norm", forward))
    op, outer, reduced, inner, dims = NORMALISATIONS[forward]
    assert (shape.family, shape.op, shape.rows, shape.cols, shape.inner) == ("layernorm", op, outer, reduced, inner)
    assert spec_of(shape) == {"dims": dims, "strided": inner > 1, "weight": None, "wshape": []}
    for device, templates in (("cpu", {"rmsnorm_cpu"}), ("cuda", {"rmsnorm_cuda_rows", "rmsnorm_cuda_inner"})):
        ideas = builtin.propose(shape_info := info_of(tmp_path, "norm", forward), device, 4, [], None)
        assert ideas and {i.template for i in ideas} <= templates, (device, shape_info.name)
        assert all(i.params["op"] == op for i in ideas)


@pytest.mark.parametrize("why", sorted(NOT_NORMALISATIONS))
def test_other_divisions_by_a_norm_are_refused(why: str, tmp_path: Path) -> None:
    assert builtin.analyse(info_of(tmp_path, "refused", NOT_NORMALISATIONS[why], "[torch.randn(5, 5, 5)]")) is None


def test_the_problem_files_and_the_suite(tmp_path: Path) -> None:
    s = builtin.analyse(load_problem(PROBLEMS / "sum_dim_small.py").info)
    assert (s.family, s.op, s.rows, s.cols, s.inner) == ("reduce", "sum", 32, 512, 64)
    assert spec_of(s)["keepdim"] is True
    suite = PROBLEMS / "suite"
    expected = {
        "argmax_lastdim_8192x8192": ("reduce", "argmax", 1),
        "argmin_dim1_128x2048x256": ("reduce", "argmin", 256),
        "max_lastdim_256x256x1024": ("reduce", "max", 1),
        "mean_dim1_64x1024x1024": ("reduce", "mean", 1024),
        "min_dim1_32x4096x512": ("reduce", "min", 512),
        "sum_lastdim_4096x16384": ("reduce", "sum", 1),
        "log_softmax_16384x8192": ("softmax", "log_softmax", 1),
        "rmsnorm_16x64x256x256": ("layernorm", "rms", 65536),
        "rmsnorm_lastdim_8192x8192": ("layernorm", "rms", 1),
    }
    for name, want in expected.items():
        if not (suite / f"{name}.py").exists():
            continue  # the suite is written alongside; its problems are checked once they are there
        s = builtin.analyse(load_problem(suite / f"{name}.py").info)
        assert s is not None and (s.family, s.op, s.inner) == want, name


@pytest.mark.parametrize(
    ("name", "floats_per_thread"),
    [("sum_lastdim_4096x16384", 64), ("max_lastdim_256x256x1024", 64), ("argmax_lastdim_8192x8192", 64)],
)
def test_first_cuda_seed_of_a_contiguous_reduction(name: str, floats_per_thread: int) -> None:
    # The H200 sweeps in bench/RESULTS.md: 256-thread blocks, 4 float4 loads in flight, ~64 floats a thread
    # (argmax too); groups of 512-1024 threads a row ran 1.2-2.5x slower on the GPU.
    s = builtin.analyse(load_problem(PROBLEMS / "suite" / f"{name}.py").info)
    template, p = seeds(s, "cuda")[0]
    assert template == "reduce_cuda_rows" and (p["block"], p["unroll"]) == (256, 4)
    assert s.cols / p["tpr"] == floats_per_thread


@pytest.mark.parametrize("name", ["mean_dim1_64x1024x1024", "min_dim1_32x4096x512", "argmin_dim1_128x2048x256"])
def test_first_cuda_seed_of_a_strided_reduction_fills_the_gpu(name: str) -> None:
    # Up to 8 threads down each float4 column, and the reduced dim split only until ~1024 threads an SM
    # (132 SMs) are busy: the sweep's best points; a split costs a second launch and host time.
    s = builtin.analyse(load_problem(PROBLEMS / "suite" / f"{name}.py").info)
    template, p = seeds(s, "cuda")[0]
    threads = s.rows * (s.inner // 4) * p["by"] * p["split"]
    assert template == "reduce_cuda_inner" and p["by"] == 8
    assert 1024 * 132 // 2 < threads <= 1024 * 132


# --------------------------------------------------------------------------------------- propose


def test_only_templates_that_fit_the_variant_are_proposed(tmp_path: Path) -> None:
    rows = info_of(tmp_path, "rows", "torch.argmax(x, dim=-1)")
    strided = info_of(tmp_path, "strided", "torch.argmax(x, dim=1)")
    rms = load_problem(PROBLEMS / "rmsnorm_small.py").info
    log_softmax = info_of(tmp_path, "lsm", "torch.log_softmax(x, dim=-1)", "[torch.randn(64, 3000)]")
    layernorm = load_problem(PROBLEMS / "layernorm_small.py").info
    cases = [
        (rows, "cuda", {"reduce_cuda_rows"}),
        (strided, "cuda", {"reduce_cuda_inner"}),
        (rows, "cpu", {"reduce_cpu"}),
        (rms, "cuda", {"rmsnorm_cuda_inner"}),
        (rms, "cpu", {"rmsnorm_cpu"}),
    ]
    for problem, device, allowed in cases:
        ideas = builtin.propose(problem, device, 40, [], None)
        assert len(ideas) == 40
        assert {i.template for i in ideas} == allowed, (problem.name, device)
        shape = builtin.analyse(problem)
        assert all(i.params["op"] == shape.op and i.params["spec"] == shape.spec for i in ideas)
    for device in ("cpu", "cuda"):
        ideas = builtin.propose(log_softmax, device, 30, [], None)
        assert ideas and all(i.params.get("op") == "log_softmax" for i in ideas)
        mine = ("softmax_cpu", "softmax_cuda_block", "softmax_cuda_warp")
        assert all("log-softmax" in i.text for i in ideas if i.template in mine)
        plain = builtin.propose(layernorm, device, 30, [], None)
        assert plain and not any(i.template.startswith("rmsnorm") for i in plain)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["sum_dim_small", "rmsnorm_small"])
def test_rounds_branch_from_the_parent_and_never_repeat(name: str, device: str) -> None:
    problem = load_problem(PROBLEMS / f"{name}.py").info
    first = builtin.propose(problem, device, 3, [], None)
    assert len(first) == 3 and first == builtin.propose(problem, device, 3, [], None)
    tried: list[dict] = []
    seen: set[str] = set()
    parent = None
    for round_ in range(4):
        ideas = builtin.propose(problem, device, 3, tried, parent)
        assert ideas
        for i, idea in enumerate(ideas):
            k = idea.template + json.dumps(idea.params, sort_keys=True)
            assert k not in seen
            seen.add(k)
            assert idea.text and idea.expected_gain
            status = {"template": idea.template, "params": idea.params, "status": "ok"}
            tried.append({**status, "speedup_vs_best": 1.0 + 0.1 * round_ - 0.01 * i, "pct_roofline": 10.0 + round_})
        best = max(tried, key=lambda r: r["speedup_vs_best"])
        parent = {"template": best["template"], "params": best["params"]}


# ---------------------------------------------------------------------------------------- render


def cuda_spread() -> list[tuple[str, dict]]:
    """Each CUDA template of these families: every op at its defaults, each parameter value once (ops cycling),
    every seed of a spread of shapes, and the softmax templates as log-softmax."""
    ops = {t: OPS for t in ("reduce_cuda_rows", "reduce_cuda_inner")} | {
        t: tuple(NORMS) for t in ("rmsnorm_cuda_rows", "rmsnorm_cuda_inner")
    }
    points: dict[str, tuple[str, dict]] = {}

    def add(template: str, params: dict) -> None:
        try:
            point = TEMPLATES[template].normalise(params)
        except ValueError:
            return
        points[template + json.dumps(point, sort_keys=True)] = (template, point)

    for name, template_ops in ops.items():
        t = TEMPLATES[name]
        for op in template_ops:
            add(name, {**t.defaults(), "op": op, "eps": 1e-6} if op == "rms" else {**t.defaults(), "op": op})
        k = 0
        for p in t.params:
            for v in p.values:
                op = template_ops[k % len(template_ops)]
                add(name, {**t.defaults(), p.name: v, "op": op})
                k += 1
    shapes = [
        builtin.Shape("reduce", rows=8192, cols=8192, op="argmax"),
        builtin.Shape("reduce", rows=16, cols=1 << 20, op="sum"),
        builtin.Shape("reduce", rows=65536, cols=100, op="min"),
        builtin.Shape("reduce", rows=128, cols=2048, inner=256, op="argmin"),
        builtin.Shape("reduce", rows=32, cols=4096, inner=7, op="mean"),
        builtin.Shape("layernorm", rows=16, cols=64, inner=65536, op="rms"),
        builtin.Shape("layernorm", rows=8192, cols=8192, op="rms", eps=1e-6),
        builtin.Shape("layernorm", rows=4, cols=1 << 20, op="rms"),
        builtin.Shape("layernorm", rows=1, cols=1 << 26, op="l2", eps=0.0),  # a Frobenius norm: one long row
        builtin.Shape("layernorm", rows=32768, cols=65535, op="l1_mean", eps=0.0),
    ]
    for shape in shapes:
        for template, params in seeds(shape, "cuda"):
            add(template, {**params, **shape.extras()})
    for name in ("softmax_cuda_block", "softmax_cuda_warp"):
        t = TEMPLATES[name]
        for items in (0, 8):
            add(name, {**t.defaults(), "items": items, "op": "log_softmax"})
    return list(points.values())


def test_every_cuda_rendering_compiles_with_nvrtc() -> None:
    spread = cuda_spread()
    assert len(spread) >= 60
    assert_cuda_renderings_compile((t, p, builtin.render(t, p, "cuda")) for t, p in spread)


def test_rmsnorm_candidates_hold_the_weight_at_the_references_path() -> None:
    spec = json.dumps({"dims": [-1], "strided": False, "weight": "norm.weight", "wshape": [5]})
    model = _cpu_model("rmsnorm_cpu", {"op": "rms", "spec": spec})
    assert list(model.state_dict()) == ["norm.weight"]
    for template in ("rmsnorm_cuda_rows", "rmsnorm_cpu"):
        src = builtin.render(template, {"op": "rms", "spec": spec}, TEMPLATES[template].device)
        assert "self.norm = nn.Module()" in src and "self.norm.weight = nn.Parameter(torch.ones((5,)))" in src
    bare = json.dumps({"dims": [1], "strided": True, "weight": None, "wshape": []})
    assert list(_cpu_model("rmsnorm_cpu", {"op": "rms", "spec": bare}).state_dict()) == []


# ------------------------------------------------------------------------------ CPU, in process


def _cpu_model(template: str, params: dict, *init: Any) -> torch.nn.Module:
    src = builtin.render(template, params, "cpu")
    return import_source(src, f"<{template}>", "candidate").ModelNew(*init)


def _reference(op: str, x: torch.Tensor, dims: list[int] | None, keepdim: bool) -> torch.Tensor:
    if op in ("max", "min"):
        fn = torch.amax if op == "max" else torch.amin
        return fn(x, dim=dims if dims is not None else list(range(x.dim())), keepdim=keepdim)
    if op in ("argmax", "argmin"):
        fn = torch.argmax if op == "argmax" else torch.argmin
        return fn(x, dim=dims[0], keepdim=keepdim) if dims else fn(x, keepdim=keepdim)
    fn = torch.sum if op == "sum" else torch.mean
    return fn(x, dim=dims, keepdim=keepdim) if dims is not None else fn(x)


LAYOUTS = [  # (shape, dims, keepdim): rows, long rows, strided, split-strided, every dim, merged dims
    ((7, 300), [1], False),
    ((3, 70000), [-1], True),
    ((5, 37, 9), [1], True),
    ((3, 500, 17), [-2], False),
    ((4, 5, 6), None, False),
    ((6, 33, 20), [0, 1], False),
]
CPU_POINTS = [  # every threading mode, both vector widths, unroll 1 to 4, small column blocks
    {"parallel": "out", "unroll": 2, "vec": 16},
    {"parallel": "split", "unroll": 1, "vec": 8, "chunk": 1024, "cols_block": 256},
    {"parallel": "none", "unroll": 4, "vec": 16, "cols_block": 256},
]


# CUDA points: every group size class (sub-warp, warp, several warps), split rows, scalar loads; strided dims with
# one and several threads down a column, splits, scalar columns.
CUDA_POINTS = {
    "reduce_cuda_rows": [
        {"tpr": 32, "block": 256, "unroll": 4},
        {"tpr": 1024, "block": 1024, "split": 8},
        {"tpr": 4, "block": 128, "vec4": False},
        {"tpr": 128, "block": 256, "unroll": 2, "split": 4},
    ],
    "reduce_cuda_inner": [
        {"bx": 32, "by": 4},
        {"bx": 64, "by": 1, "split": 4},
        {"bx": 16, "by": 8, "vec4": False, "split": 2},
    ],
}


def _hard_inputs(op: str, shape: tuple[int, ...], device: str = "cpu") -> list[torch.Tensor]:
    """Random values; for the extreme and index ops also ties, NaNs among ties, all -inf and all +inf."""
    inputs = [torch.randn(shape)]
    if op not in ("sum", "mean"):
        ties = torch.randint(0, 3, shape).float()  # many equal values: the first index must win
        with_nan = ties.clone()
        with_nan.view(-1)[torch.randperm(with_nan.numel())[:5]] = float("nan")
        inputs += [ties, with_nan, torch.full(shape, float("-inf")), torch.full(shape, float("inf"))]
    return [x.to(device) for x in inputs]


def _assert_reduces_like_torch(
    model: torch.nn.Module, op: str, x: torch.Tensor, dims: Any, keepdim: bool, rtol: float = 1e-5
) -> None:
    """Indices and extremes exactly; sums and means to ``rtol`` (fp32 sums in another order differ)."""
    got, want = model(x), _reference(op, x, dims, keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype, (op, x.shape, dims)
    if op.startswith("arg"):
        assert torch.equal(got, want), (op, x.shape, dims, x.flatten()[:12])
    elif op in ("max", "min"):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-4, equal_nan=True)


def _layouts(op: str) -> list[tuple[tuple[int, ...], Any, bool, str]]:
    """LAYOUTS that the op takes (torch's argmax takes one dim or none), each with its spec."""
    out = []
    for shape, dims, keepdim in LAYOUTS:
        if op.startswith("arg") and dims is not None and len(dims) > 1:
            continue
        strided = split_dims(shape, dims)[2] > 1
        out.append((shape, dims, keepdim, json.dumps({"dims": dims, "keepdim": keepdim, "strided": strided})))
    return out


@pytest.mark.parametrize("op", OPS)
def test_cpu_reductions_match_torch_on_ties_nan_and_inf(op: str) -> None:
    torch.manual_seed(0)
    for shape, dims, keepdim, spec in _layouts(op):
        for point in CPU_POINTS:
            model = _cpu_model("reduce_cpu", {**point, "op": op, "spec": spec}, 1)
            for x in _hard_inputs(op, shape):
                _assert_reduces_like_torch(model, op, x, dims, keepdim)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_cuda_reductions_match_torch_on_ties_nan_and_inf(op: str) -> None:
    torch.manual_seed(0)
    for shape, dims, keepdim, spec in _layouts(op):
        template = "reduce_cuda_inner" if json.loads(spec)["strided"] else "reduce_cuda_rows"
        for point in CUDA_POINTS[template]:
            src = builtin.render(template, {**point, "op": op, "spec": spec}, "cuda")
            model = import_source(src, f"<{template}>", "candidate").ModelNew()
            for x in _hard_inputs(op, shape, "cuda"):
                # A 70000-element fp32 sum in the GPU's order is ~4e-5 relative from torch's: rtol 1e-4.
                _assert_reduces_like_torch(model, op, x, dims, keepdim, rtol=1e-4)


def test_cpu_mean_and_sum_are_accurate_against_float64() -> None:
    torch.manual_seed(1)
    x = torch.randn(4, 1 << 18) + 3.0  # a large common offset: a naive running fp32 sum loses digits
    for op in ("sum", "mean"):
        spec = json.dumps({"dims": [1], "keepdim": False, "strided": False})
        got = _cpu_model("reduce_cpu", {"op": op, "spec": spec})(x).double()
        want = _reference(op, x.double(), [1], False)
        assert ((got - want).abs() / want.abs()).max() < 1e-6


@pytest.mark.parametrize("algorithm", ["three_pass", "online_recompute"])
def test_cpu_log_softmax_matches_torch(algorithm: str) -> None:
    torch.manual_seed(2)
    model = _cpu_model("softmax_cpu", {"algorithm": algorithm, "op": "log_softmax", "stream": True})
    for shape in ((33, 1000), (3, 70001), (5, 7)):
        x = torch.randn(shape) * 4
        torch.testing.assert_close(model(x), torch.log_softmax(x, dim=-1), rtol=1e-5, atol=1e-5)


def test_cpu_rmsnorm_matches_torch() -> None:
    torch.manual_seed(3)
    for threads, cols_block in (("all", 1024), ("one", 256)):
        point = {"threads": threads, "cols_block": cols_block, "op": "rms", "eps": 1e-6}
        strided = json.dumps({"dims": [1], "strided": True, "weight": None, "wshape": []})
        model = _cpu_model("rmsnorm_cpu", {**point, "spec": strided}, 16)
        for shape in ((4, 16, 24, 20), (2, 300, 1030), (3, 5, 7)):
            x = torch.randn(shape)
            want = x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-6)
            torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
        weighted = json.dumps({"dims": [-2, -1], "strided": False, "weight": "norm.weight", "wshape": [6, 70]})
        model = _cpu_model("rmsnorm_cpu", {**point, "spec": weighted})
        with torch.no_grad():
            model.norm.weight.copy_(torch.randn(6, 70))
        x = torch.randn(9, 6, 70)
        want = torch.nn.functional.rms_norm(x, (6, 70), model.norm.weight, 1e-6)
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["l2", "l1", "l1_mean"])
def test_cpu_l1_and_l2_normalisation_match_torch(op: str) -> None:
    torch.manual_seed(4)
    divisor = {
        "l2": lambda x, d: torch.linalg.vector_norm(x, dim=d, keepdim=True),
        "l1": lambda x, d: torch.sum(torch.abs(x), dim=d, keepdim=True),
        "l1_mean": lambda x, d: torch.mean(torch.abs(x), dim=d, keepdim=True),
    }[op]
    layouts = [((7, 300), [1]), ((3, 70001), [-1]), ((5, 37, 9), [1]), ((3, 500, 17), [-2]), ((4, 5, 6), None)]
    for threads, cols_block in (("all", 1024), ("one", 256)):
        for shape, dims in layouts:
            spec = json.dumps({"dims": dims, "strided": split_dims(shape, dims)[2] > 1, "weight": None, "wshape": []})
            model = _cpu_model("rmsnorm_cpu", {"threads": threads, "cols_block": cols_block, "op": op, "spec": spec})
            x = torch.randn(shape)
            want = x / divisor(x, dims if dims is not None else list(range(x.dim())))
            torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6, msg=f"{op} {shape} {dims} {threads}")


# ------------------------------------------------------------------------- CPU, for real, sandboxed


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


def _sandboxed(path: Path, sandbox: LocalSandbox, k: int, device: str = "cpu") -> None:
    problem = load_problem(path)
    ideas = builtin.propose(problem.info, device, k, [], None)
    assert len(ideas) == k
    for idea in ideas:
        ev = evaluate(
            problem,
            builtin.render(idea.template, idea.params, device),
            sandbox=sandbox,
            device=device,  # type: ignore[arg-type]
            available_bytes=8 << 30,
            references=("eager",),
            timing=QUICK,
        )
        assert ev.result.status == "ok", f"{idea.template} {idea.params}: {ev.result.reason}\n{ev.result.details}"
        assert ev.result.correctness is not None and ev.result.correctness.passed
        worst = ev.result.correctness.worst("max_abs_error")
        assert worst is not None and worst < 1e-3, f"{idea.template} {idea.params}: error {worst}"
        assert ev.result.correctness.parameters_copied == len(problem.make_model("cpu", 0).state_dict())


@pytest.mark.parametrize("name", ["sum_dim_small", "rmsnorm_small"])
def test_round_one_cpu_candidates_are_correct_in_the_sandbox(name: str, sandbox: LocalSandbox) -> None:
    _sandboxed(PROBLEMS / f"{name}.py", sandbox, 4)


def test_cpu_candidates_of_other_variants_in_the_sandbox(tmp_path: Path, sandbox: LocalSandbox) -> None:
    # Ties everywhere, and a reduced dim short enough that the harness's tolerance cannot hide an index off by one.
    argmax = write(tmp_path, "argmax_ties", "torch.argmax(x, dim=1)", "[torch.randint(0, 4, (64, 90, 33)).float()]")
    log_softmax = write(tmp_path, "log_softmax", "torch.log_softmax(x, dim=-1)", "[torch.randn(96, 3000)]")
    # A weight that is not ones: correct only when the harness copied it by name.
    weighted = write(
        tmp_path,
        "rms_weight",
        "self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))",
        "[torch.randn(40, 512)]",
        init="[512]",
        ctor="d",
        body="        self.weight = nn.Parameter(torch.randn(d))\n",
    )
    l2 = write(tmp_path, "l2_norm", "x / torch.norm(x, p=2, dim=1, keepdim=True)", "[torch.randn(64, 3000)]")
    frobenius = write(tmp_path, "frobenius", "x / torch.norm(x, p='fro')", "[torch.randn(16, 64, 70)]")
    l1 = write(tmp_path, "l1_strided", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", "[torch.rand(8, 300, 40)]")
    for path in (argmax, log_softmax, weighted, l2, frobenius, l1):
        _sandboxed(path, sandbox, 2)


@pytest.mark.gpu
def test_cuda_l1_and_l2_normalisation_in_the_sandbox(tmp_path: Path, sandbox: LocalSandbox) -> None:
    # Rows held in registers, one row of 16 M elements split over blocks (the Frobenius norm), a strided dim.
    l2 = write(tmp_path, "l2_rows", "x / torch.norm(x, p=2, dim=1, keepdim=True)", "[torch.randn(256, 3000)]")
    frobenius = write(tmp_path, "frobenius", "x / torch.norm(x, p='fro')", "[torch.randn(64, 256, 1024)]")
    l1 = write(tmp_path, "l1_strided", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", "[torch.rand(16, 300, 256)]")
    mean = write(tmp_path, "l1_mean", "x / torch.mean(torch.abs(x), dim=1, keepdim=True)", "[torch.rand(512, 4096)]")
    for path in (l2, frobenius, l1, mean):
        _sandboxed(path, sandbox, 2, "cuda")
