"""The builtin offline catalog: recognising families, proposing ideas, rendering candidates.

CPU candidates are evaluated for real through the sandbox on the small twins; CUDA candidates are
compiled with NVRTC (no GPU needed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agents import builtin
from agents.builtin.catalog import TEMPLATES
from agents.builtin.seeds import seeds
from bench.matmul_accuracy import worst
from sandbox.evaluation import evaluate
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS, assert_cuda_renderings_compile
from tools.problem import Problem, ProblemInfo, build_model, exec_source, load_problem, make_inputs
from tools.protocol import CorrectnessReport, TimingConfig

FAMILY = {
    "softmax_small": "softmax",
    "softmax_4096x65536": "softmax",
    "layernorm_small": "layernorm",
    "layernorm_16x64x256x256": "layernorm",
    "matmul_small": "matmul",
    "matmul_4096": "matmul",
    "gelu_chain_small": "elementwise",
    "linear_relu_small": "epilogue",
}
# Templates that compute one kind of their family's problems, and a problem of that kind.
OWN_PROBLEM = {"epilogue_cuda_half": "suite/conv2d_scale_clamp_64x32x128x128"}  # convolutions only
QUICK = TimingConfig(min_trials=20, min_seconds=0.1)


def info(name: str) -> ProblemInfo:
    return load_problem(PROBLEMS / f"{name}.py").info


def write_problem(
    tmp_path: Path, name: str, forward: str, inputs: str, init: str = "[]", ctor: str = ""
) -> ProblemInfo:
    src = (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self{', ' + ctor if ctor else ''}):\n        super().__init__()\n"
        + (f"        self.ln = nn.LayerNorm({ctor})\n" if ctor else "")
        + f"\n    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n"
    )
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return load_problem(path).info


# ------------------------------------------------------------------------------------- recognise


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_recognise_the_builtin_problems(name: str) -> None:
    assert builtin.recognise(info(name)) == FAMILY[name]


def test_shapes_of_the_builtin_problems() -> None:
    s = builtin.analyse(info("layernorm_16x64x256x256"))
    assert (s.rows, s.cols, s.eps) == (16, 64 * 256 * 256, 1e-5)
    s = builtin.analyse(info("matmul_small"))
    assert (s.batch, s.m, s.k, s.n) == (1, 200, 136, 264)
    s = builtin.analyse(info("softmax_small"))
    assert (s.rows, s.cols) == (96, 3000)


def test_unknown_problems_get_no_family_and_no_ideas(tmp_path: Path) -> None:
    flip = write_problem(tmp_path, "flip", "torch.flip(x, [1])", "[torch.randn(64, 64)]")
    first_dim = write_problem(tmp_path, "softmax_dim0", "torch.softmax(x, dim=0)", "[torch.randn(8, 16)]")
    two_ops = write_problem(tmp_path, "softmax_twice", "torch.softmax(x * 2, dim=1)", "[torch.randn(8, 16)]")
    half = write_problem(tmp_path, "softmax_half", "torch.softmax(x, dim=1)", "[torch.randn(8, 16).half()]")
    for problem in (flip, first_dim, two_ops, half):
        assert builtin.recognise(problem) is None, problem.name
        for device in ("cpu", "cuda"):
            assert builtin.propose(problem, device, 4, [], None) == []
    gelu = write_problem(tmp_path, "gelu", "torch.nn.functional.gelu(x)", "[torch.randn(64, 64)]")
    assert builtin.recognise(gelu) == "elementwise"  # tests/test_builtin_elementwise.py has the pointwise cases
    last_dim = write_problem(tmp_path, "softmax_last", "torch.softmax(x, dim=-1)", "[torch.randn(2, 3, 16)]")
    assert builtin.recognise(last_dim) == "softmax"
    ln = write_problem(tmp_path, "ln", "self.ln(x)", "[torch.randn(4, 10)]", init="[(10,)]", ctor="normalized_shape")
    assert builtin.recognise(ln) == "layernorm"
    assert all("eps" not in i.params for i in builtin.propose(ln, "cpu", 3, [], None))


def write_matmul(tmp_path: Path, name: str, forward: str, a: tuple[int, int], b: tuple[int, int]) -> ProblemInfo:
    src = (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n\n    def forward(self, A, B):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return [torch.randn{a}, torch.randn{b}]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    (tmp_path / f"{name}.py").write_text(src)
    return load_problem(tmp_path / f"{name}.py").info


TRANSPOSED = {
    # forward, A's shape, B's shape: which operands are transposed (A @ B is 40 x 72 by 56)
    "torch.matmul(A.T, B)": ((72, 40), (72, 56), [True, False]),
    "A @ B.t()": ((40, 72), (56, 72), [False, True]),
    "torch.mm(A.transpose(0, 1), B.T)": ((72, 40), (56, 72), [True, True]),
}


@pytest.mark.parametrize("forward", sorted(TRANSPOSED))
def test_a_matmul_of_transposed_inputs_is_a_matmul(forward: str, tmp_path: Path) -> None:
    a, b, transposed = TRANSPOSED[forward]
    problem = write_matmul(tmp_path, "transposed", forward, a, b)
    s = builtin.analyse(problem)
    assert (s.family, s.m, s.k, s.n) == ("matmul", 40, 72, 56)
    assert json.loads(s.spec) == {"transposed": transposed}
    for device in ("cpu", "cuda"):
        ideas = builtin.propose(problem, device, 3, [], None)
        assert ideas and all(i.params["spec"] == s.spec for i in ideas)


def test_a_tensor_times_a_matrix_is_a_matmul_of_its_flattened_rows(tmp_path: Path) -> None:
    three = builtin.analyse(write_matmul(tmp_path, "three", "torch.matmul(A, B)", (4, 10, 72), (72, 56)))
    four = builtin.analyse(write_matmul(tmp_path, "four", "A @ B", (2, 3, 5, 72), (72, 56)))
    assert (three.family, three.batch, three.m, three.k, three.n, three.spec) == ("matmul", 1, 40, 72, 56, "")
    assert (four.m, four.k, four.n) == (30, 72, 56)
    # The matrix first: torch broadcasts it over the batch (a bmm), which the wrappers do not take.
    assert builtin.analyse(write_matmul(tmp_path, "matrix_first", "B.T @ A", (4, 72, 10), (72, 56))) is None


EINSUM = {
    # forward, A's shape, B's shape: (m, k, n, transposed)
    'torch.einsum("bijl,lk->bijk", A, B)': ((2, 3, 5, 72), (72, 56), (30, 72, 56, "")),
    'torch.einsum("bil,kl->bik", A, B)': ((4, 10, 72), (56, 72), (40, 72, 56, '{"transposed": [false, true]}')),
    'torch.einsum("ik,kj->ij", A, B)': ((40, 72), (72, 56), (40, 72, 56, "")),
    'torch.einsum("ki,kj->ij", A, B)': ((72, 40), (72, 56), (40, 72, 56, '{"transposed": [true, false]}')),
}


@pytest.mark.parametrize("forward", sorted(EINSUM))
def test_an_einsum_that_is_a_matmul_is_a_matmul(forward: str, tmp_path: Path) -> None:
    a, b, facts = EINSUM[forward]
    s = builtin.analyse(write_matmul(tmp_path, "einsum", forward, a, b))
    assert s is not None and (s.family, s.m, s.k, s.n, s.spec) == ("matmul", *facts)


def test_other_views_around_a_matmul_are_refused(tmp_path: Path) -> None:
    refused = {
        "gram": ("A.T @ A + 0 * B", (72, 40), (40, 40)),  # A twice, and a tail
        "swapped": ("torch.matmul(B.T, A)", (72, 40), (72, 56)),  # input 1 first
        "permuted_a": ('torch.einsum("bli,lk->bik", A, B)', (4, 72, 10), (72, 56)),  # A's dims reordered first
        "permuted_out": ('torch.einsum("bil,lk->bki", A, B)', (4, 10, 72), (72, 56)),  # the product re-laid out
        "regrouped": ("(A.reshape(20, 144) @ B.reshape(144, 28)).reshape(40, 14)", (40, 72), (72, 56)),
    }
    for name, (forward, a, b) in refused.items():
        assert builtin.analyse(write_matmul(tmp_path, name, forward, a, b)) is None, name
    # A transpose it never multiplies changes nothing: the product is still A @ B.
    unused = builtin.analyse(write_matmul(tmp_path, "unused", "(A.T, A @ B)[1]", (40, 72), (72, 56)))
    assert (unused.family, unused.m, unused.k, unused.n, unused.spec) == ("matmul", 40, 72, 56, "")


def test_a_non_default_layernorm_eps_is_carried_into_the_candidates(tmp_path: Path) -> None:
    ln = write_problem(
        tmp_path, "ln_eps", "self.ln(x)", "[torch.randn(4, 10)]", init="[(10,)]", ctor="normalized_shape, eps=1e-3"
    )
    assert builtin.analyse(ln).eps == 1e-3
    for device in ("cpu", "cuda"):
        for idea in builtin.propose(ln, device, 3, [], None):
            assert idea.params["eps"] == 1e-3
            assert "EPS = 0.001" in builtin.render(idea.template, idea.params, device)


def test_few_long_layernorm_rows_start_from_the_persistent_and_wide_kernels_as_the_h200_sweeps_chose(
    tmp_path: Path,
) -> None:
    first, second, third, fourth = seeds(builtin.analyse(info("layernorm_16x64x256x256")), "cuda")[:4]
    # 4 Mi-element rows: 16 float4 a thread of 512 threads on each of 132 SMs hold a row's chunk.
    assert first == ("layernorm_cuda_persistent", {"block": 512, "per_sm": 1, "items": 16, "unroll": 4, "stage": 8})
    assert second == ("layernorm_cuda_wide", {"block": 512, "split": 32, "unroll": 2, "rows_per_block": 16})
    assert third == ("layernorm_cuda_wide", {"block": 1024, "split": 64, "unroll": 1, "rows_per_block": 8})
    assert fourth == ("layernorm_cuda_persistent", {"block": 1024, "per_sm": 1, "items": 8, "unroll": 2, "stage": 2})
    half = load_problem(PROBLEMS / "suite" / "layernorm_32x1024x2048.py").info  # 2 Mi-element rows
    # Three 64 KiB chunks of x fit a block's shared memory: x held in three buffers first, the staged point last.
    held = ("layernorm_cuda_persistent", {"block": 512, "per_sm": 1, "items": 8, "unroll": 2, "hold": 3})
    staged = ("layernorm_cuda_persistent", {"block": 512, "per_sm": 1, "items": 8, "unroll": 4, "stage": 4})
    persistent = [s for s in seeds(builtin.analyse(half), "cuda") if s[0] == "layernorm_cuda_persistent"]
    assert persistent[0] == held and persistent[-1] == staged
    assert seeds(builtin.analyse(half), "cuda")[0] == held
    # Fewer columns per row: fewer tiles, so fewer rows per block keep ~4 blocks on each SM.
    ln = write_problem(
        tmp_path, "ln_128", "self.ln(x)", "[torch.randn(128, 65536)]", init="[(65536,)]", ctor="normalized_shape"
    )
    # Rows of 64 Ki elements: a grid-wide wait per row would cost more than reading the row; no persistent seed.
    assert all(t != "layernorm_cuda_persistent" for t, _ in seeds(builtin.analyse(ln), "cuda"))
    params = seeds(builtin.analyse(ln), "cuda")[0][1]
    tiles = 65536 // (4 * 512 * 2)
    assert params["rows_per_block"] == 2 and tiles * (128 // 4) < 4 * 132 <= tiles * (128 // 2)
    # The kernels read float4: rows that are not a multiple of 4 never get the wide template.
    odd = write_problem(
        tmp_path, "ln_odd", "self.ln(x)", "[torch.randn(16, 65538)]", init="[(65538,)]", ctor="normalized_shape"
    )
    assert all(not t.endswith(("_wide", "_persistent")) for t, _ in seeds(builtin.analyse(odd), "cuda"))


# --------------------------------------------------------------------------------------- propose


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(FAMILY))
def test_round_one_is_a_deterministic_spread(name: str, device: str) -> None:
    problem = info(name)
    ideas = builtin.propose(problem, device, 3, [], None)
    assert len(ideas) == 3
    assert ideas == builtin.propose(problem, device, 3, [], None)
    assert len({(i.template, json.dumps(i.params, sort_keys=True)) for i in ideas}) == 3
    for idea in ideas:
        assert TEMPLATES[idea.template].device == device
        assert TEMPLATES[idea.template].family == FAMILY[name]
        assert idea.text and idea.expected_gain
        json.dumps(idea.params)  # JSON-serialisable
    assert builtin.propose(problem, device, 0, [], None) == []


def record(idea: builtin.IdeaSpec, speedup: float, pct: float, status: str = "ok") -> dict:
    return {
        "template": idea.template,
        "params": idea.params,
        "status": status,
        "speedup_vs_best": speedup,
        "pct_roofline": pct,
    }


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["softmax_small", "layernorm_16x64x256x256", "matmul_small"])
def test_later_rounds_branch_from_the_parent_and_never_repeat(name: str, device: str) -> None:
    problem = info(name)
    tried: list[dict] = []
    seen: set[str] = set()
    parent = None
    for round_ in range(5):
        ideas = builtin.propose(problem, device, 3, tried, parent)
        assert 0 < len(ideas) <= 3
        assert ideas == builtin.propose(problem, device, 3, tried, parent)  # deterministic
        for i, idea in enumerate(ideas):
            k = idea.template + json.dumps(idea.params, sort_keys=True)
            assert k not in seen, f"round {round_} repeats {k}"
            seen.add(k)
            tried.append(record(idea, 1.0 + 0.1 * round_ - 0.01 * i, 10.0 + round_))
        if parent is not None:  # every idea is one parameter (or the template) away from the parent
            for idea in ideas:
                if idea.template == parent["template"] and "change" in idea.text:
                    diff = {k for k in idea.params if idea.params[k] != parent["params"].get(k)}
                    assert len(diff) == 1, (idea.params, parent["params"])
        best = max(tried, key=lambda r: r["speedup_vs_best"])
        parent = {"template": best["template"], "params": best["params"]}
    # LLM candidates in the history (no template) are ignored, and failures steer away from a template.
    tried.append({"template": None, "params": None, "status": "ok", "speedup_vs_best": 9.0, "pct_roofline": 90.0})
    assert builtin.propose(problem, device, 3, tried, parent)


def test_the_space_is_eventually_exhausted() -> None:
    problem = info("layernorm_16x64x256x256")
    every = [
        {"template": t.name, "params": p, "status": "ok", "speedup_vs_best": 1.0, "pct_roofline": 50.0}
        for t in builtin.templates_for("layernorm", "cuda")
        if t.fits(builtin.analyse(problem))  # not the RMSNorm templates of the family
        for p in t.points()
    ]
    assert builtin.propose(problem, "cuda", 4, every, None) == []
    parent = {"template": every[0]["template"], "params": every[0]["params"]}
    assert builtin.propose(problem, "cuda", 4, every, parent) == []
    assert len(builtin.propose(problem, "cuda", 4, every[:-2], parent)) == 2


def test_tuning_keeps_going_the_way_that_helped() -> None:
    problem = info("matmul_4096")
    base = {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4}
    parent = {"template": "matmul_cuda_tiled", "params": base}
    tried = [
        {"template": "matmul_cuda_tiled", "params": base, "status": "ok", "speedup_vs_best": 0.6, "pct_roofline": 50}
    ]
    # Close to the roofline (50 %): tuning first, in parameter order (bm first).
    first = builtin.propose(problem, "cuda", 1, tried, parent)[0]
    assert first.template == "matmul_cuda_tiled" and first.params["bm"] != 64
    # The parent beat its bk=8 neighbour: bk keeps growing before anything else.
    slower = {"template": "matmul_cuda_tiled", "params": {**base, "bk": 8}, "status": "ok", "speedup_vs_best": 0.5}
    first = builtin.propose(problem, "cuda", 1, [*tried, slower], parent)[0]
    assert first.params == {**base, "bk": 32}, first.params
    assert "bk 16 → 32" in first.text
    # Far from the roofline (10 %): structural moves come first (the tensor-core template), and every move
    # within the parent's template is one parameter away from it.
    far = [{**tried[0], "pct_roofline": 10}]
    ideas = builtin.propose(problem, "cuda", 4, far, parent)
    assert ideas[0].template == "matmul_cuda_mma"
    for idea in ideas:
        if idea.template == "matmul_cuda_tiled":
            assert sum(idea.params[k] != base[k] for k in base) == 1
    # Under the strict policy the static checks would block TF32 sources: the planner never offers them.
    strict = builtin.propose(problem, "cuda", 8, far, parent, "strict")
    assert strict and all(idea.template != "matmul_cuda_mma" for idea in strict)


def test_fallback_values_come_after_tuning_moves() -> None:
    problem = info("softmax_small")
    first = builtin.propose(problem, "cpu", 1, [], None)[0]
    tried = [record(first, 1.2, 10.0)]
    parent = {"template": first.template, "params": first.params}
    ideas = builtin.propose(problem, "cpu", 8, tried, parent)
    moved = [next(k for k in i.params if i.params[k] != first.params[k]) for i in ideas]
    assert "binding" not in moved and "parallel" not in moved, moved


# ---------------------------------------------------------------------------------------- render


def test_render_rejects_what_it_cannot_build() -> None:
    with pytest.raises(ValueError, match="unknown template"):
        builtin.render("nope", {}, "cpu")
    with pytest.raises(ValueError, match="targets cuda"):
        builtin.render("softmax_cuda_block", {}, "cpu")
    with pytest.raises(ValueError, match="is not one of"):
        builtin.render("softmax_cuda_block", {"block": 96}, "cuda")
    with pytest.raises(ValueError, match="unknown parameter"):
        builtin.render("softmax_cpu", {"warp": 1}, "cpu")


def cuda_spread() -> list[tuple[str, dict]]:
    """Every template's defaults, each parameter value once (others at default), and every seed."""
    points: dict[str, tuple[str, dict]] = {}
    # Templates that render the problem's own expression (elementwise, epilogue) take its spec.
    specs = {f: builtin.analyse(info(name)).extras().get("spec") for name, f in FAMILY.items()}
    # A template for one kind of its family's problems takes a problem of that kind.
    specs |= {name: builtin.analyse(info(problem)).spec for name, problem in OWN_PROBLEM.items()}
    for t in TEMPLATES.values():
        if t.device != "cuda":
            continue
        spec_of = specs.get(t.name, specs.get(t.family))
        spec = {"spec": spec_of} if "spec" in t.extras and spec_of else {}
        defaults = {**t.defaults(), **spec}
        candidates = [defaults] + [{**defaults, p.name: v} for p in t.params for v in p.values]
        for raw in candidates:
            try:
                point = t.normalise(raw)
            except ValueError:
                continue
            points[t.name + json.dumps(point, sort_keys=True)] = (t.name, point)
    for name in ("matmul_cuda_tiled", "matmul_cuda_mma"):  # a problem that multiplies A.T and B.T
        t = TEMPLATES[name]
        point = t.normalise({**t.defaults(), "spec": json.dumps({"transposed": [True, True]})})
        points[name + json.dumps(point, sort_keys=True)] = (name, point)
    for name in FAMILY:
        shape = builtin.analyse(info(name))
        for template, params in seeds(shape, "cuda"):
            spec = {"spec": shape.spec} if "spec" in TEMPLATES[template].extras and shape.spec else {}
            point = TEMPLATES[template].normalise({**params, **spec})
            points[template + json.dumps(point, sort_keys=True)] = (template, point)
    return list(points.values())


def test_every_cuda_rendering_compiles_with_nvrtc() -> None:
    spread = cuda_spread()
    assert len(spread) >= 40
    assert_cuda_renderings_compile((t, p, builtin.render(t, p, "cuda")) for t, p in spread)


# ------------------------------------------------------------------------- CPU, for real, sandboxed


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox()
    yield sb
    sb.close()


def assert_correct(
    problem: Problem, template: str, params: dict, device: str, sandbox: LocalSandbox
) -> CorrectnessReport:
    """Evaluate a rendered point in the sandbox (eager reference only); it must run and be correct."""
    ev = evaluate(
        problem,
        builtin.render(template, params, device),
        sandbox=sandbox,
        device=device,  # type: ignore[arg-type]
        available_bytes=(64 if device == "cuda" else 8) << 30,
        references=("eager",),
        timing=QUICK,
    )
    assert ev.result.status == "ok", f"{template} {params}: {ev.result.reason}\n{ev.result.details}"
    assert ev.result.correctness is not None and ev.result.correctness.passed
    return ev.result.correctness


def test_cpu_matmuls_of_transposed_n_d_and_einsum_inputs_are_correct_in_the_sandbox(
    tmp_path: Path, sandbox: LocalSandbox
) -> None:
    cases = [(forward, a, b) for forward, (a, b, _) in sorted(TRANSPOSED.items())]
    cases.append(("torch.matmul(A, B)", (4, 10, 72), (72, 56)))  # a 3-D tensor times a matrix
    cases += [(forward, a, b) for forward, (a, b, _) in sorted(EINSUM.items())]
    for k, (forward, a, b) in enumerate(cases):
        write_matmul(tmp_path, f"transposed_{k}", forward, a, b)
        problem = load_problem(tmp_path / f"transposed_{k}.py")
        idea = builtin.propose(problem.info, "cpu", 1, [], None)[0]
        correctness = assert_correct(problem, idea.template, idea.params, "cpu", sandbox)
        assert correctness.worst("max_abs_error") < 1e-4, forward


@pytest.mark.parametrize("name", ["softmax_small", "layernorm_small", "matmul_small"])
def test_round_one_cpu_candidates_are_correct_in_the_sandbox(name: str, sandbox: LocalSandbox) -> None:
    problem = load_problem(PROBLEMS / f"{name}.py")
    ideas = builtin.propose(problem.info, "cpu", 6, [], None)
    assert len(ideas) >= 4
    for idea in ideas:
        correctness = assert_correct(problem, idea.template, idea.params, "cpu", sandbox)
        worst = correctness.worst("max_abs_error")
        assert worst is not None and worst < 1e-4, f"{idea.template} {idea.params}: error {worst}"


# ------------------------------------------------------------------------- CUDA, for real (gpu marker)

# Small problems first; the suite's sizes where a template needs them (tiles of 128, a reduced last dim).
GPU_PROBLEMS = [
    *sorted(PROBLEMS.glob("*_small.py")),
    PROBLEMS / "matmul_4096.py",
    PROBLEMS / "suite" / "sum_lastdim_4096x16384.py",
    PROBLEMS / "suite" / "rmsnorm_lastdim_8192x8192.py",
]


def one_point_per_cuda_template() -> list[tuple[str, dict, Path]]:
    """Each CUDA template of the row, norm, reduction and matmul families at its defaults, on the first problem
    it computes (the pointwise families have their own GPU test in test_builtin_elementwise.py)."""
    shapes = [(path, builtin.analyse(load_problem(path).info)) for path in GPU_PROBLEMS]
    out = []
    for t in TEMPLATES.values():
        if t.device != "cuda" or t.family in ("elementwise", "epilogue"):
            continue
        for path, shape in shapes:
            if shape is None or shape.family != t.family or not t.fits(shape):
                continue
            point = t.normalise({**t.defaults(), **shape.extras()})
            if t.runs_on(point, shape):
                out.append((t.name, point, path))
                break
    return out


def test_every_cuda_template_has_a_problem_to_run_on_the_gpu() -> None:
    wanted = {t.name for t in TEMPLATES.values() if t.device == "cuda" and t.family not in ("elementwise", "epilogue")}
    assert {name for name, _, _ in one_point_per_cuda_template()} == wanted


@pytest.mark.gpu
@pytest.mark.parametrize("template", [name for name, _, _ in one_point_per_cuda_template()])
def test_every_cuda_template_is_correct_on_the_gpu(template: str, sandbox: LocalSandbox) -> None:
    _, params, path = next(p for p in one_point_per_cuda_template() if p[0] == template)
    assert_correct(load_problem(path), template, params, "cuda", sandbox)


@pytest.mark.gpu
@pytest.mark.parametrize(("block", "hold"), [(256, 2), (1024, 2), (256, 3), (1024, 3)])
def test_the_persistent_layernorm_holding_x_in_shared_memory_is_correct_on_the_gpu(
    block: int, hold: int, sandbox: LocalSandbox
) -> None:
    """Five rows, so each of a block's x buffers is filled and refilled; 2,880 columns over 132 blocks leave the
    last blocks' chunks empty. Block 256 with two buffers asks for exactly 48 KiB of dynamic shared memory, which
    with the kernel's static share needs the opt-in."""
    params = {"block": block, "per_sm": 1, "items": 4, "unroll": 2, "hold": hold}
    assert_correct(load_problem(PROBLEMS / "layernorm_small.py"), "layernorm_cuda_persistent", params, "cuda", sandbox)


@pytest.mark.gpu
def test_strict_matmul_seeds_are_correct_on_the_gpu(sandbox: LocalSandbox) -> None:
    """The strict policy's first ideas on 4096² (the bulk-copy kernel, then the SIMT one with and without the early
    first slice) agree with cuBLAS fp32 to within 1e-3: they sum each output in K order, as cuBLAS does."""
    problem = load_problem(PROBLEMS / "matmul_4096.py")
    ideas = builtin.propose(problem.info, "cuda", 4, [], None, policy="strict")
    assert [idea.template for idea in ideas] == ["matmul_cuda_bulk"] + ["matmul_cuda_simt"] * 3
    simt = ideas[1:]
    assert any(idea.params["early"] for idea in simt) and any(not idea.params["early"] for idea in simt)
    for idea in ideas:
        worst = assert_correct(problem, idea.template, idea.params, "cuda", sandbox).worst("max_abs_error")
        assert worst is not None and worst < 1e-3, f"{idea.params}: error {worst}"


@pytest.mark.gpu
@pytest.mark.parametrize("k", [32, 96])
def test_the_bulk_copy_gemm_with_fewer_k_steps_than_buffers_is_correct_on_the_gpu(
    k: int, tmp_path: Path, sandbox: LocalSandbox
) -> None:
    """One or three K steps of 32 against three buffers (the refill loop never runs, or once), two buffers, and BK 8
    with six buffers refilled two steps late; B's tiles by tensor map and packed."""
    write_matmul(tmp_path, "short", "torch.matmul(A, B)", (128, k), (k, 256))
    problem = load_problem(tmp_path / "short.py")
    for params in ({}, {"b_tiles": "packed"}, {"bk": 8, "stages": 6, "lag": 2}, {"stages": 2}):
        assert_correct(problem, "matmul_cuda_bulk", params, "cuda", sandbox)


@pytest.mark.gpu
def test_relaxed_matmul_seeds_keep_well_inside_the_tolerance_on_the_gpu() -> None:
    """The bf16x3 seeds (mma.sync and wgmma) on 4096² randn products: at most a third of what atol = rtol = 1e-2
    allows at any output, against a float64 product (mma.sync's measured a fifth to a ninth, bench/RESULTS.md;
    plain TF32 uses seven times it)."""
    problem = load_problem(PROBLEMS / "matmul_4096.py")
    ideas = builtin.propose(problem.info, "cuda", 4, [], None)
    ideas = [i for i in ideas if i.template in ("matmul_cuda_bf16x3", "matmul_cuda_wgmma")]
    assert {i.template for i in ideas} == {"matmul_cuda_bf16x3", "matmul_cuda_wgmma"}
    A, B = make_inputs(problem.module.get_inputs, "cuda", seed=1)
    with torch.no_grad():
        exact = A.double() @ B.double()
        for idea in ideas:
            module = exec_source(builtin.render(idea.template, idea.params, "cuda"), "bf16x3.py", "candidate")
            out = build_model(module.ModelNew, [], "cuda", seed=0)(A, B)
            share = worst(out, exact, 1e-2, 1e-2)[1]
            assert share < 1 / 3, f"{idea.params}: {share:.3f} of the tolerance"


@pytest.mark.gpu
def test_cuda_matmuls_of_transposed_n_d_einsum_and_bmm_inputs_are_correct(
    tmp_path: Path, sandbox: LocalSandbox
) -> None:
    write_matmul(tmp_path, "both", "torch.matmul(A.T, B.T)", (128, 256), (384, 128))  # (256 x 128) @ (128 x 384)
    write_matmul(tmp_path, "three_d", "torch.matmul(A, B)", (2, 128, 128), (128, 384))  # (256 x 128) @ (128 x 384)
    einsum = 'torch.einsum("bijl,kl->bijk", A, B)'
    write_matmul(tmp_path, "einsum", einsum, (2, 2, 64, 128), (384, 128))  # (256 x 128) @ (128 x 384)
    write_matmul(tmp_path, "bmm", "torch.bmm(A, B)", (2, 128, 128), (2, 128, 384))  # two (128 x 128) @ (128 x 384)
    for name in ("both", "three_d", "einsum", "bmm"):
        problem = load_problem(tmp_path / f"{name}.py")
        shape = builtin.analyse(problem.info)
        for template, params in (
            ("matmul_cuda_tiled", {}),
            ("matmul_cuda_simt", {}),
            ("matmul_cuda_bulk", {}),  # batched: A packed per batch entry, B's tensor map three-dimensional
            ("matmul_cuda_bulk", {"b_tiles": "packed"}),
            ("matmul_cuda_mma", {}),
            ("matmul_cuda_wgmma", {}),
            ("matmul_cuda_wgmma", {"fused": True}),  # B's (K, N) rows transposed on their way to shared memory
        ):
            t = TEMPLATES[template]
            point = t.normalise({**t.defaults(), **params, **shape.extras()})
            assert_correct(problem, template, point, "cuda", sandbox)
