"""``epilogue_cuda_half``: a convolution by cuDNN on fp16 copies of its operands, then the pointwise tail reading the
fp16 result and writing fp32. Where it is offered (convolutions, relaxed policy), that the kernels compute the tail
from fp16 values (emulated on the CPU), that the reduced precision is found and said, and what fp16 costs the
suite's convolutions beside the TF32 the reference runs at (bench/conv_half_accuracy.py)."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
import torch

from agents import builtin
from agents.builtin import pointwise
from agents.builtin.catalog import TEMPLATES
from agents.builtin.templates_elementwise_epilogue import tail_bias
from agents.builtin.templates_elementwise_nhwc import CAST_TILE, FLOAT_HALF_PTX
from bench.conv_half_accuracy import bias_free, contender_errors
from bench.matmul_accuracy import worst
from tests.conftest import assert_cuda_renderings_compile
from tests.test_builtin_elementwise import (
    _SHIM,
    CONV,
    CONV_T,
    HALF_CPP,
    HALF_PTX,
    _emulated,
    _run_emulated,
    cuda_source,
    write_problems,
)
from tools.checks import static_findings
from tools.compile import build_c
from tools.problem import build_model, copy_parameters, exec_source, load_problem, make_inputs

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
SUITE = PROBLEMS / "suite"
# More channels than one tile of the channels-last tail kernel holds (32), an odd count of channels and of positions
# (the kernels move pairs of either where the count is even; the other test problems have even ones), and broadcast
# operands of every kind that kernel indexes: one value a channel, one a position, one a column.
CONV_WIDE = """
class Model(nn.Module):
    \"\"\"Conv2d without padding to 39 channels, then ReLU, a gain a channel, shifts a position and a column.\"\"\"

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 39, 3)
        self.gain = nn.Parameter(torch.rand(39, 1, 1) + 0.5)
        self.plane = nn.Parameter(torch.randn(7, 9))
        self.column = nn.Parameter(torch.randn(9))

    def forward(self, x):
        return torch.relu(self.conv(x)) * self.gain + self.plane - self.column


def get_inputs():
    return [torch.randn(3, 3, 9, 11)]


def get_init_inputs():
    return []
"""
# The cast kernel's PTX (fp32 to fp16, rounded to nearest even) and its C++ for the emulation.
FLOAT_HALF_CPP = "{ _Float16 v = (_Float16)f; std::memcpy(&h, &v, 2); }"
# Each problem's source, and the attribute that holds its convolution.
CONVS = {"conv_tail": (CONV, "conv"), "conv_t_tail": (CONV_T, "up"), "conv_wide": (CONV_WIDE, "conv")}


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_problems(
        tmp_path_factory.mktemp("half_problems"), {k: (src, "epilogue") for k, (src, _) in CONVS.items()}
    )


@pytest.mark.parametrize("name", sorted(CONVS))
def test_it_is_offered_for_convolutions_under_the_relaxed_policy_only(name: str, problems: dict[str, Path]) -> None:
    info = load_problem(problems[name]).info
    relaxed = builtin.propose(info, "cuda", 8, [], None)
    assert relaxed[0].template == "epilogue_cuda_half"
    assert relaxed[0].params["bias"] == "tail"  # the conv's bias added in fp32
    strict = builtin.propose(info, "cuda", 8, [], None, policy="strict")
    assert strict and all(idea.template != "epilogue_cuda_half" for idea in strict)
    linear = builtin.analyse(load_problem(PROBLEMS / "linear_relu_small.py").info)
    assert not TEMPLATES["epilogue_cuda_half"].fits(linear)  # a linear layer's reference is full fp32
    with pytest.raises(ValueError, match="convolution's tail; its heavy op is a linear"):
        builtin.render("epilogue_cuda_half", {"spec": linear.spec}, "cuda")


def test_every_channels_last_point_compiles_with_nvrtc(problems: dict[str, Path]) -> None:
    # The spread of test_builtin_elementwise changes one parameter at a time from the defaults (the reference's
    # layout, where the tile and the cast are irrelevant): they are rendered here.
    template = TEMPLATES["epilogue_cuda_half"]
    points = {}
    for name in sorted(CONVS):
        spec = builtin.analyse(load_problem(problems[name]).info).spec
        for tile in template.param("tile").values:
            for fast_math in (False, True):
                for cast in template.param("cast").values:
                    point = {"spec": spec, "layout": "nhwc", "tile": tile, "fast_math": fast_math, "cast": cast}
                    params = template.normalise(point)
                    points[json.dumps(params, sort_keys=True)] = params
    # Three tiles, two casts; fast math only where a tail has a transcendental (conv_tail's tanh).
    assert len(points) == 3 * 4 * 2
    assert_cuda_renderings_compile(
        (template.name, p, builtin.render(template.name, p, "cuda")) for p in points.values()
    )


@pytest.mark.parametrize("name", sorted(CONVS))
def test_the_reduced_precision_is_found_in_its_source(name: str, problems: dict[str, Path]) -> None:
    info = load_problem(problems[name]).info
    shape = builtin.analyse(info)
    src = builtin.render("epilogue_cuda_half", {"spec": shape.spec}, "cuda")
    assert ".to(torch.float16)" in src and "out = torch.empty(h.shape, dtype=_F32" in src
    findings = static_findings(src, info)
    assert findings and all(f.trick == "precision_downgrade" and f.policy_dependent for f in findings), findings


def fp16_case(path: Path, conv_attr: str, bias: str) -> tuple[torch.Tensor, torch.Tensor, list, str]:
    """(the fp16 result cuDNN hands the tail, the reference's tail on it in fp32, the kernels' broadcast operands as
    (tensor, size, inner), the problem's spec) for one problem, with the conv's bias in the library or the tail."""
    problem = load_problem(path)
    shape = builtin.analyse(problem.info)
    model = problem.make_model("cpu", seed=0)
    (x,) = problem.make_inputs("cpu", seed=1)
    conv = getattr(model, conv_attr)
    keep_bias = bias == "library"
    with torch.no_grad():
        h = bias_free(conv, x, conv.weight)
        h16 = (h + conv.bias.view(-1, 1, 1) if keep_bias else h).half()
        heavy = h16.float() if keep_bias else h16.float() + conv.bias.view(-1, 1, 1)
        conv.forward = lambda _: heavy  # the reference's tail, in fp32, on those values
        expected = model(x)
    spec = json.loads(shape.spec)
    spec = spec if keep_bias else tail_bias(spec)
    state = model.state_dict()
    bands = []
    for leaf in spec["leaves"]:
        if not leaf["full"]:
            size, inner = pointwise.band(leaf["shape"], expected.shape)
            bands.append((state[leaf["key"]].contiguous(), size, inner))
    return h16, expected, bands, shape.spec


@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize("bias", ["tail", "library"])
def test_the_streaming_tail_reads_the_fp16_result_when_emulated(
    name: str, bias: str, problems: dict[str, Path]
) -> None:
    h16, expected, bands, spec = fp16_case(problems[name], CONVS[name][1], bias)
    params = {"spec": spec, "bias": bias, "layout": "nchw", "block": 128, "items": 2}
    lib = _emulated(builtin.render("epilogue_cuda_half", params, "cuda"), 1, len(bands), 128, halves=frozenset({0}))
    bits = h16.contiguous().view(torch.int16)
    n = expected.numel() - 3  # not a multiple of 4: the float4 kernel's last elements run one a thread
    for kernel, per_thread, grid in (("ew_vec_i32", 4, None), ("ew_scalar_i32", 1, None), ("ew_vec_i64", 4, 3)):
        y = torch.full_like(expected, float("nan"))
        cover = -(-n // (128 * 2 * per_thread))
        _run_emulated(lib, kernel, grid or cover, [bits], bands, y.view(-1)[:n])
        torch.testing.assert_close(y.view(-1)[:n], expected.reshape(-1)[:n], atol=1e-6, rtol=1e-6, msg=kernel)
        assert y.view(-1)[n:].isnan().all(), kernel  # nothing written past n


# The channels-last tail kernel shares a tile between a block's threads across __syncthreads(): emulated with a
# thread per CUDA thread of a block, a std::barrier as the barrier, and the tile as a static (blocks run in turn).
_THREADED_SHIM = _SHIM.replace(
    "static dim3 blockIdx, threadIdx, gridDim;", "static dim3 blockIdx, gridDim;\nstatic thread_local dim3 threadIdx;"
) + (
    "#include <barrier>\n#include <thread>\n#include <vector>\n"
    "static std::barrier<>* emu_barrier;\n#define __syncthreads() emu_barrier->arrive_and_wait()\n"
    "#define __shared__ static\n"
)


def _threaded_driver(kernel: str, params: list[str], names: list[str]) -> str:
    """C++ ``run_<kernel>(gx, gy, gz, params...)``: every block of the grid in turn, a std::thread per CUDA thread."""
    return (
        f'extern "C" void run_{kernel}(unsigned gx, unsigned gy, unsigned gz, {", ".join(params)})\n{{\n'
        "    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;\n"
        "    std::barrier<> bar(256);\n    emu_barrier = &bar;\n"
        "    for (unsigned z = 0; z < gz; ++z)\n"
        "    for (unsigned by = 0; by < gy; ++by)\n"
        "    for (unsigned bx = 0; bx < gx; ++bx) {\n"
        "        blockIdx.x = bx; blockIdx.y = by; blockIdx.z = z;\n"
        "        std::vector<std::thread> threads;\n"
        "        for (unsigned t = 0; t < 256; ++t)\n"
        f"            threads.emplace_back([=] {{ threadIdx.x = t; {kernel}({', '.join(names)}); }});\n"
        "        for (auto& t : threads) t.join();\n"
        "    }\n}\n"
    )


def _emulated_threaded(cuda: str, drivers: list[str], name: str) -> ctypes.CDLL:
    report = build_c(
        _THREADED_SHIM + cuda.replace(HALF_PTX, HALF_CPP).replace(FLOAT_HALF_PTX, FLOAT_HALF_CPP) + "\n".join(drivers),
        name=name,
        lang="c++",
        # -fno-gnu-unique: the tile, a static in an inline function, would otherwise be one object for every library
        # this process loads whose kernel has the same signature (GCC marks such statics unique process-wide), so a
        # larger tile of a later point would overrun an earlier point's smaller one.
        flags=("-O1", "-fno-strict-aliasing", "-std=c++20", "-pthread", "-fno-gnu-unique"),
    )
    assert report.ok, report.log
    return ctypes.CDLL(report.artifact)


def _emulated_nhwc(src: str, nb: int) -> ctypes.CDLL:
    """The channels-last tail's CUDA compiled as C++ with run_<kernel>(gx, gy, gz, args...) for both entries, and
    the input's cast kernel's where the point has it."""
    cuda = cuda_source(src)
    assert HALF_PTX in cuda
    drivers = []
    for suffix, ctype in (("i32", "unsigned int"), ("i64", "long long")):
        params = ["const unsigned short* f0"] + [
            f"const float* b{k}, {ctype} inner{k}, {ctype} size{k}" for k in range(nb)
        ]
        names = ["f0"] + [f"b{k}, inner{k}, size{k}" for k in range(nb)] + ["y", "N", "C", "P"]
        scalars = [f"{ctype} N", f"{ctype} C", f"{ctype} P"]
        drivers.append(_threaded_driver(f"ew_nhwc_{suffix}", [*params, "float* y", *scalars], names))
        if FLOAT_HALF_PTX in cuda:
            cast = ["const float* x", "unsigned short* xh", *scalars]
            drivers.append(_threaded_driver(f"to_nhwc_half_{suffix}", cast, ["x", "xh", "N", "C", "P"]))
    return _emulated_threaded(cuda, drivers, "ew_nhwc_emulated")


@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize(("bias", "tile"), [("tail", "32x64"), ("library", "64x64"), ("tail", "32x128")])
def test_the_channels_last_tail_transposes_the_fp16_result_when_emulated(
    name: str, bias: str, tile: str, problems: dict[str, Path]
) -> None:
    h16, expected, bands, spec = fp16_case(problems[name], CONVS[name][1], bias)
    src = builtin.render("epilogue_cuda_half", {"spec": spec, "bias": bias, "layout": "nhwc", "tile": tile}, "cuda")
    lib = _emulated_nhwc(src, len(bands))
    bits = h16.permute(0, 2, 3, 1).contiguous().view(torch.int16)  # what cuDNN writes: [n][h][w][c]
    batch, channels = expected.shape[:2]
    positions = expected.numel() // (batch * channels)
    tile_c, tile_p = map(int, tile.split("x"))
    tiles = (-(-positions // tile_p), -(-channels // tile_c))
    for kernel, samples in (("ew_nhwc_i32", batch), ("ew_nhwc_i64", 1)):  # one grid slice: a loop over the samples
        y = torch.full_like(expected, float("nan"))
        c = ctypes.c_int64 if kernel.endswith("i64") else ctypes.c_uint32
        args: list = [*tiles, samples, ctypes.c_void_p(bits.data_ptr())]
        for t, size, inner in bands:
            args += [ctypes.c_void_p(t.data_ptr()), c(inner), c(size)]
        getattr(lib, f"run_{kernel}")(*args, ctypes.c_void_p(y.data_ptr()), c(batch), c(channels), c(positions))
        torch.testing.assert_close(y, expected, atol=1e-6, rtol=1e-6, msg=kernel)


# Inputs of 2-D and 3-D convolutions: channels more than one tile (32) and fewer, positions no tile (64) divides.
@pytest.mark.parametrize("shape", [(3, 40, 9, 11), (2, 64, 8, 16), (2, 5, 3, 4, 6)])
def test_our_cast_writes_the_input_as_fp16_channels_last_when_emulated(
    shape: tuple[int, ...], problems: dict[str, Path]
) -> None:
    _, _, bands, spec = fp16_case(problems["conv_wide"], "conv", "tail")
    src = builtin.render("epilogue_cuda_half", {"spec": spec, "layout": "nhwc", "cast": "kernel"}, "cuda")
    assert "F.conv2d(_to_nhwc_half(x0), self.conv.weight.to(torch.float16, memory_format=" in src  # the weight: torch
    lib = _emulated_nhwc(src, len(bands))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 100  # fp16 keeps 11 bits of each: rounding
    batch, channels = shape[:2]
    positions = x.numel() // (batch * channels)
    expected = x.half().movedim(1, -1).contiguous().view(torch.int16)  # what torch's cast writes, [n][spatial][c]
    tile_c, tile_p = CAST_TILE
    grid = (-(-positions // tile_p), -(-channels // tile_c))
    for kernel, samples in (("to_nhwc_half_i32", batch), ("to_nhwc_half_i64", 1)):  # a grid slice loops the samples
        xh = torch.full_like(expected, -1)  # 0xffff: a NaN pattern no cast writes
        c = ctypes.c_int64 if kernel.endswith("i64") else ctypes.c_uint32
        getattr(lib, f"run_{kernel}")(
            *grid,
            samples,
            ctypes.c_void_p(x.data_ptr()),
            ctypes.c_void_p(xh.data_ptr()),
            c(batch),
            c(channels),
            c(positions),
        )
        assert torch.equal(xh, expected), kernel  # bit for bit, every element written


@pytest.mark.parametrize("name", ["conv2d_relu_biasadd_64x64x128x128", "conv2d_scale_clamp_64x32x128x128"])
def test_fp16_costs_the_suite_convolutions_about_what_tf32_does(name: str) -> None:
    rows = {row[0].split(" ")[0]: row[2] for row in contender_errors(str(SUITE / f"{name}.py"), 1, 1, 1e-2, 1e-2)}
    assert rows["fp32"] < 1e-3
    assert rows["tf32"] < rows["fp16"] < 1.5 * rows["tf32"] and rows["fp16"] < 0.2  # the result's rounding adds a bit
    assert rows["bf16"] > 4 * rows["fp16"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["conv2d_relu_biasadd_64x64x128x128", "conv2d_scale_clamp_64x32x128x128"])
def test_fp16_keeps_the_suite_convolutions_near_the_reference_s_error_on_the_gpu(name: str) -> None:
    """The real thing behind the emulated figures (fp16: 0.104 and 0.024 of the tolerance; TF32 operands, eager's
    default, 0.083 and 0.021): the first seed on the GPU against float64 uses at most a fifth of it. Eager's own
    share is in the message: cuDNN may pick a kernel without TF32 for it."""
    problem = load_problem(SUITE / f"{name}.py")
    init = list(problem.module.get_init_inputs())
    reference = build_model(problem.module.Model, init, "cuda", seed=0)
    (idea,) = builtin.propose(problem.info, "cuda", 1, [], None)
    module = exec_source(builtin.render(idea.template, idea.params, "cuda"), "half.py", "candidate")
    candidate = build_model(module.ModelNew, init, "cuda", seed=0)
    copy_parameters(reference, candidate)
    (x,) = make_inputs(problem.module.get_inputs, "cuda", seed=1)
    x = x[:8]
    with torch.no_grad():
        eager_out = reference(x)  # cuDNN at TF32, PyTorch's default
        exact = reference.double()(x.double())
        reference.float()
        eager = worst(eager_out, exact, 1e-2, 1e-2)[1]
        share = worst(candidate(x), exact, 1e-2, 1e-2)[1]
    assert idea.template == "epilogue_cuda_half"
    assert share < 0.2, f"{share:.3f} of the tolerance (eager: {eager:.3f})"
