"""The catalog entries for fused pointwise chains ("elementwise") and heavy op + pointwise tail ("epilogue"):
templates, descriptions, first-round seeds and the planner's reasons (``BASE`` / ``CHANGES`` / ``facts``,
merged into ``agents.builtin.words``).

Imported at the end of ``agents.builtin.catalog`` (it builds on ``Param`` and ``Template`` from there); the
expression comes from ``agents.builtin.pointwise`` and the kernels from ``templates_elementwise_cuda`` and
``templates_elementwise_cpu``.
Every template takes the problem's ``spec`` as an extra (unsearched) parameter; rendering without it fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agents.builtin import templates_matmul_bf16x3, templates_matmul_wgmma
from agents.builtin.pointwise import load
from agents.builtin.shape import Shape
from agents.builtin.template import Param, Params, Template
from agents.builtin.templates_elementwise_cpu import render_elementwise_cpu, render_epilogue_cpu
from agents.builtin.templates_elementwise_cuda import (
    gemm_point,
    render_elementwise_cuda,
    render_epilogue_cuda,
    render_epilogue_cuda_bf16x3,
    render_epilogue_cuda_half,
    render_epilogue_cuda_wgmma,
    wgmma_point,
)
from agents.builtin.templates_elementwise_expression import expression_text, pointwise_ops, transcendental
from agents.builtin.templates_elementwise_gemm_tail import gemm_tail_fits
from agents.builtin.templates_elementwise_nhwc import tile_shape
from agents.builtin.templates_elementwise_python import channels_last

H200_SMS = 132
FAMILIES = ("elementwise", "epilogue")
LIBRARY = {"linear": "cuBLAS", "matmul": "cuBLAS", "conv": "cuDNN"}
CPU_LIBRARY = {"linear": "the CPU BLAS", "matmul": "the CPU BLAS", "conv": "oneDNN"}


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _spec(p: Params) -> dict[str, Any] | None:
    return load(p["spec"]) if p.get("spec") else None


def _heavy_name(spec: dict[str, Any] | None) -> str:
    h = (spec or {}).get("heavy") or {}
    if h.get("op") == "conv":
        return f"conv{'_transpose' if h['transposed'] else ''}{h['dims']}d"
    return h.get("op", "the heavy op")


def _has_bias(p: Params) -> bool | None:
    spec = _spec(p)
    return bool(spec["heavy"].get("bias")) if spec and spec.get("heavy") else None


def _has_math(p: Params) -> bool | None:
    spec = _spec(p)
    return transcendental(spec) if spec else None


# ------------------------------------------------------------------------------------ descriptions


def _expr(p: Params, limit: int = 90) -> str:
    spec = _spec(p)
    return expression_text(spec, limit) if spec else "the problem's pointwise chain"


def _math_text(p: Params) -> str:
    if _has_math(p) is False:
        return ""
    return ", __expf/__logf/__fdividef fast math (~2 ulp)" if p["fast_math"] else ", full-precision math"


def _cuda_text(p: Params) -> str:
    unit = "float4" if p["vec4"] else "float"
    grid = (
        "one element chunk per thread (a grid covering the tensor)"
        if p["grid"] == 0
        else f"a grid-stride loop over {p['grid']} wave(s) of resident blocks"
    )
    return f"{p['block']}-thread blocks, {p['items']} {unit}(s) per thread in flight, {grid}{_math_text(p)}"


def _cpu_text(p: Params) -> str:
    threads = (
        ("OpenMP over contiguous ranges" if p["chunk"] == 0 else f"OpenMP over {p['chunk']}-element tasks")
        if p["parallel"]
        else "one thread"
    )
    binding = "a tiny CPython extension" if p["binding"] == "cext" else "ctypes"
    return f"{threads}, {p['vec']}-wide SIMD (polynomial exp/log/tanh/erf); called through {binding}"


def _tail_text(p: Params, cuda: bool) -> str:
    spec = _spec(p)
    heavy = (spec or {}).get("heavy") or {}
    lib = (LIBRARY if cuda else CPU_LIBRARY).get(heavy.get("op", ""), "the library")
    where = "in place on its output" if p["inplace"] else "into a new buffer"
    bias = ""
    if _has_bias(p):
        bias = "; the bias added in the library call" if p["bias"] == "library" else "; the bias added in the tail"
    return f"{_heavy_name(spec)} by {lib} (torch), then the tail {_expr(p)} as one kernel {where}{bias}"


def _tile_text(p: Params) -> str:
    channels, positions = tile_shape(p)
    return f"{channels}-channel x {positions}-position"


def _epilogue_half_text(p: Params) -> str:
    bias = ""
    if _has_bias(p):
        bias = (
            "; the bias added in the library call (fp16)" if p["bias"] == "library" else "; the bias added in the tail"
        )
    if p["layout"] == "nhwc":
        casts = "our kernel casts the input, torch the weight" if p["cast"] == "kernel" else "torch casts both"
        return (
            f"{_heavy_name(_spec(p))} by cuDNN in fp16 on channels-last copies of the input and the weight ({casts}), "
            f"then the tail {_expr(p)} from its fp16 result into a new fp32 buffer in the reference's order, one "
            f"kernel moving {_tile_text(p)} tiles through shared memory{bias}{_math_text(p)}"
        )
    return (
        f"{_heavy_name(_spec(p))} by cuDNN in fp16 (torch casts the input and the weight), then the tail {_expr(p)} "
        f"from its fp16 result into a new fp32 buffer as one kernel{bias}: {_cuda_text(p)}"
    )


def _epilogue_bf16x3_text(p: Params) -> str:
    where = "in place on its output" if p["inplace"] else "into a new buffer"
    bias = "; the bias added in the tail" if _has_bias(p) else ""
    return (
        f"linear by our bf16x3 GEMM ({p['warp']} warp tiles, BK={p['bk']}, {p['stages']}-stage pipeline"
        + (", promoted partials" if p["promote"] else "")
        + f"), then the tail {_expr(p)} as one kernel {where}{bias}: {_cuda_text(p)}"
    )


def _epilogue_wgmma_text(p: Params) -> str:
    bias = "; the bias added in the tail" if _has_bias(p) else ""
    gemm = (
        f"linear by our bf16x3 wgmma GEMM (128x{p['bn']} blocks of two warpgroups, {p['stages']}-stage pipeline"
        + (", the split fused into it" if p["fused"] else "")
        + ")"
    )
    if p["tail"] == "gemm":
        return f"{gemm}, the tail {_expr(p)} applied by the GEMM before it stores the output{bias}{_math_text(p)}"
    where = "in place on its output" if p["inplace"] else "into a new buffer"
    return f"{gemm}, then the tail {_expr(p)} as one kernel {where}{bias}: {_cuda_text(p)}"


def _linear_fits(s: Shape, k_step: int) -> bool:
    """A linear layer (x @ weight.T) whose M, N and K a bf16x3 GEMM's 128 x 128 x ``k_step`` tiles divide."""
    heavy = (load(s.spec) if s.spec else {}).get("heavy") or {}
    return heavy.get("op") == "linear" and s.m % 128 == 0 and s.n % 128 == 0 and s.k % k_step == 0


def _conv(s: Shape) -> bool:
    return ((load(s.spec) if s.spec else {}).get("heavy") or {}).get("op") == "conv"


def _linear_fits_gemm(s: Shape) -> bool:
    return _linear_fits(s, 32)  # mma.sync's K steps


def _linear_fits_wgmma(s: Shape) -> bool:
    return _linear_fits(s, 64)  # wgmma's: 128-byte rows of bfloat16


def _elementwise_cuda_text(p: Params) -> str:
    return f"one fused CUDA kernel for {_expr(p)}: {_cuda_text(p)}"


def _elementwise_cpu_text(p: Params) -> str:
    return f"one fused C pass for {_expr(p)}: {_cpu_text(p)}"


def _epilogue_cuda_text(p: Params) -> str:
    return f"{_tail_text(p, True)}: {_cuda_text(p)}"


def _epilogue_cpu_text(p: Params) -> str:
    return f"{_tail_text(p, False)}: {_cpu_text(p)}"


# --------------------------------------------------------------------------------------- templates


def _cuda_irrelevant(p: Params) -> tuple[str, ...]:
    return ("fast_math",) if _has_math(p) is False else ()


def _epilogue_cuda_irrelevant(p: Params) -> tuple[str, ...]:
    return _cuda_irrelevant(p) + (("bias",) if _has_bias(p) is False else ())


def _epilogue_wgmma_irrelevant(p: Params) -> tuple[str, ...]:
    # With the tail in the GEMM there is no tail kernel to shape, nor a GEMM output for it to overwrite.
    tail_kernel = ("inplace", "block", "items", "vec4", "grid") if p["tail"] == "gemm" else ()
    return _cuda_irrelevant(p) + tail_kernel


def _epilogue_half_irrelevant(p: Params) -> tuple[str, ...]:
    # Channels-last, the tail is the tiled transposing kernel: none of the streaming kernel's shape applies.
    tail_kernel = ("block", "items", "vec4", "grid") if p["layout"] == "nhwc" else ("tile", "cast")
    return _epilogue_cuda_irrelevant(p) + tail_kernel


def _epilogue_half_valid(p: Params) -> bool:
    # Channels-last memory formats exist for 4-D and 5-D tensors: 2-D and 3-D convolutions.
    spec = _spec(p)
    return p["layout"] == "nchw" or spec is None or channels_last(spec) is not None


def _epilogue_wgmma_valid(p: Params) -> bool:
    if not templates_matmul_wgmma.valid(wgmma_point(p)):
        return False
    # Without the problem's spec (the template's space alone) a tail in the GEMM cannot be ruled out.
    return p["tail"] == "pass" or not p.get("spec") or gemm_tail_fits(p)


def _cpu_irrelevant(p: Params) -> tuple[str, ...]:
    return ("chunk",) if not p["parallel"] else ()


def _epilogue_cpu_irrelevant(p: Params) -> tuple[str, ...]:
    return _cpu_irrelevant(p) + (("bias",) if _has_bias(p) is False else ())


_CUDA_PARAMS = (
    Param("block", (128, 256, 512, 1024), 256),
    Param("items", (1, 2, 4, 8), 2),
    Param("vec4", (True, False), True),
    Param("grid", (0, 1, 2, 4, 8, 16), 0, structural=True),  # 0: cover the tensor; k: k waves, grid-stride
    Param("fast_math", (False, True), False),
)
_CPU_PARAMS = (
    Param("parallel", (True, False), True, structural=True),
    Param("binding", ("cext", "ctypes"), "cext", structural=True),
    Param("vec", (8, 16), 16),
    Param("chunk", (0, 4096, 16384, 65536), 0),
)
# Epilogue only: where the heavy op's bias goes, and whether the tail overwrites the heavy op's output.
_TAIL_PARAMS = (
    Param("bias", ("library", "tail"), "library", structural=True),
    Param("inplace", (True, False), True),
)

# A convolution in fp16: its bias added in fp32 by the tail unless said otherwise; never in place (fp16 result);
# its operands in the reference's order or channels-last (a 2-D or 3-D convolution), the tail transposing back.
_HALF_PARAMS = (
    Param("bias", ("library", "tail"), "tail", structural=True),
    Param("layout", ("nchw", "nhwc"), "nchw", structural=True),
    Param("tile", ("32x64", "64x64", "32x128"), "32x64"),  # channels-last: channels x positions a block moves
    Param("cast", ("torch", "kernel"), "torch"),  # channels-last: the input's fp16 copy by torch or by our kernel
)

# The bf16x3 GEMM's parameters, for an epilogue whose linear layer it runs (128 x 128 blocks, one an SM).
_GEMM_PARAMS = (
    Param("warp", ("64x64", "64x32", "32x64"), "64x64"),
    Param("promote", (False, True), False),
    Param("bk", (32, 64), 32),
    Param("stages", (2, 3, 4), 3),
)

# The wgmma GEMM's parameters, for an epilogue whose linear layer it runs (128-row blocks, one an SM).
_WGMMA_PARAMS = (
    Param("bn", (128, 256), 128),
    Param("stages", (2, 3), 3),
    Param("fused", (False, True), False),
    Param("tail", ("pass", "gemm"), "pass", structural=True),  # a kernel of its own, or applied by the GEMM
)

TEMPLATES: tuple[Template, ...] = (
    Template(
        "elementwise_cuda",
        "elementwise",
        "cuda",
        _CUDA_PARAMS,
        render_elementwise_cuda,
        _elementwise_cuda_text,
        irrelevant=_cuda_irrelevant,
        extras=("spec",),
    ),
    Template(
        "elementwise_cpu",
        "elementwise",
        "cpu",
        _CPU_PARAMS,
        render_elementwise_cpu,
        _elementwise_cpu_text,
        irrelevant=_cpu_irrelevant,
        extras=("spec",),
    ),
    Template(
        "epilogue_cuda",
        "epilogue",
        "cuda",
        _TAIL_PARAMS + _CUDA_PARAMS,
        render_epilogue_cuda,
        _epilogue_cuda_text,
        irrelevant=_epilogue_cuda_irrelevant,
        extras=("spec",),
    ),
    Template(
        "epilogue_cuda_half",
        "epilogue",
        "cuda",
        _HALF_PARAMS + _CUDA_PARAMS,
        render_epilogue_cuda_half,
        _epilogue_half_text,
        valid=_epilogue_half_valid,
        irrelevant=_epilogue_half_irrelevant,
        extras=("spec",),
        applies=_conv,
        policies=("relaxed",),  # it computes in fp16
    ),
    Template(
        "epilogue_cuda_bf16x3",
        "epilogue",
        "cuda",
        _GEMM_PARAMS + _TAIL_PARAMS[1:] + _CUDA_PARAMS,
        render_epilogue_cuda_bf16x3,
        _epilogue_bf16x3_text,
        valid=lambda p: templates_matmul_bf16x3.valid(gemm_point(p), b_col=True),
        irrelevant=_cuda_irrelevant,
        extras=("spec",),
        runs_on=lambda p, s: s.k % p["bk"] == 0,
        applies=_linear_fits_gemm,
        policies=("relaxed",),  # it computes in bfloat16
    ),
    Template(
        "epilogue_cuda_wgmma",
        "epilogue",
        "cuda",
        _WGMMA_PARAMS + _TAIL_PARAMS[1:] + _CUDA_PARAMS,
        render_epilogue_cuda_wgmma,
        _epilogue_wgmma_text,
        valid=_epilogue_wgmma_valid,
        irrelevant=_epilogue_wgmma_irrelevant,
        extras=("spec",),
        runs_on=lambda p, s: s.n % p["bn"] == 0,
        applies=_linear_fits_wgmma,
        policies=("relaxed",),  # it computes in bfloat16
    ),
    Template(
        "epilogue_cpu",
        "epilogue",
        "cpu",
        _TAIL_PARAMS + _CPU_PARAMS,
        render_epilogue_cpu,
        _epilogue_cpu_text,
        irrelevant=_epilogue_cpu_irrelevant,
        extras=("spec",),
    ),
)


# ------------------------------------------------------------------------------ first-round seeds


def seeds(shape: Shape, device: str) -> list[tuple[str, Params]]:
    """A spread of first-round points, the most promising first."""
    if shape.family not in FAMILIES:
        return []
    n = shape.elements
    epilogue = shape.family == "epilogue"
    if device == "cuda":
        name = "epilogue_cuda" if epilogue else "elementwise_cuda"
        # Small tensors want more, smaller blocks (every SM busy); large ones more bytes in flight per thread.
        small = n < 4 * 1024 * 1024
        out: list[tuple[str, Params]] = [
            (name, {"block": 256, "items": 1 if small else 2, "grid": 0}),
            (name, {"block": 256, "items": 4, "grid": 2}),
            (name, {"block": 512, "items": 2, "grid": 0, "fast_math": True}),
            (name, {"block": 128, "items": 8 if not small else 2, "grid": 0}),
        ]
        if epilogue:
            out.insert(1, (name, {"bias": "tail", "block": 256, "items": 1 if small else 2}))
            out.append((name, {"inplace": False, "block": 256, "items": 2}))
            if _conv(shape):  # relaxed policy only: fp16 at the reference's own TF32 precision
                # torch.compile runs these convolutions channels-last and is 2.1-2.4x eager on conv2d_relu_biasadd.
                # On the H100 (bench/RESULTS.md, 2026-12-06) channels-last with our cast kernel and 32 x 64 tail tiles
                # was 1.38x compile there and 1.44x on conv2d_scale_clamp; the reference's order, with cuDNN's own
                # transposes around its kernel, lost to compile on both (H100 and H200). So channels-last first.
                half = [("epilogue_cuda_half", {"block": 256, "items": 1 if small else 2})]
                if channels_last(load(shape.spec)):
                    half.insert(0, ("epilogue_cuda_half", {"layout": "nhwc", "cast": "kernel"}))
                out[:0] = half
                out.append(("epilogue_cuda_half", {"block": 256, "items": 4, "grid": 2}))
            if _linear_fits_gemm(shape):  # relaxed policy only (the planner drops them under strict)
                # On gemm_bias_relu (8192x4096x4096) on the H200 the wgmma GEMM's epilogue ran 3.9-4.0x eager,
                # mma.sync's 2.0x, the library's ~1.0x (bench/RESULTS.md): wgmma first where its tiles divide.
                own = [
                    ("epilogue_cuda_bf16x3", {"block": 256, "items": 2}),
                    ("epilogue_cuda_bf16x3", {"warp": "64x32", "bk": 64, "promote": True, "block": 256, "items": 2}),
                ]
                out = [own[0], out[0], own[1], *out[1:]]
                if _linear_fits_wgmma(shape):
                    # On an H100 (bench/RESULTS.md, 2026-12-06) the tail applied by the 128x256 GEMM took 1.311 ms
                    # on gemm_bias_relu and 1.336 on matmul_gelu_scale in the suite, against 1.391 and 1.471 with
                    # the tail as a kernel; the split fused into the GEMM took 2.06-2.16, so it is left to the search.
                    out[:0] = [
                        ("epilogue_cuda_wgmma", {"bn": 256, "stages": 2, "tail": "gemm"}),
                        ("epilogue_cuda_wgmma", {"bn": 256, "stages": 2, "block": 256, "items": 2}),
                        ("epilogue_cuda_wgmma", {"block": 256, "items": 2}),
                    ]
        return out
    if device == "cpu":
        name = "epilogue_cpu" if epilogue else "elementwise_cpu"
        tiny = n < 32768  # below the kernel's own OpenMP threshold threads never start anyway
        out = [
            (name, {"parallel": True, "vec": 16}),
            (name, {"parallel": True, "vec": 8}),
            (name, {"parallel": True, "chunk": 16384}),
            (name, {"parallel": False}),
            (name, {"parallel": True, "binding": "ctypes"}),
        ]
        if epilogue:
            out.insert(0, (name, {"bias": "tail", "parallel": True}))
            out.append((name, {"inplace": False}))
        return [out[3], *out[:3], *out[4:]] if tiny and not epilogue else out
    return []


# ----------------------------------------------------------------------------------- planner words


def _bytes_once(spec: dict[str, Any]) -> int:
    n = math.prod(spec["out_shape"])
    read = sum(n if leaf["full"] else math.prod(leaf["shape"]) for leaf in spec["leaves"])
    return 4 * (read + n)


def facts(s: Shape) -> str:
    spec = load(s.spec) if s.spec else None
    if spec is None:
        return f"{s.elements} elements"
    n = math.prod(spec["out_shape"])
    ops = pointwise_ops(spec)
    passes = 8 * n * ops
    if spec["heavy"]:
        flops = spec.get("flops") or 0
        heavy = f"{_heavy_name(spec)} ({flops / 1e9:.3g} GFLOP) then " if flops else f"{_heavy_name(spec)} then "
        return (
            f"{heavy}≈{ops} pointwise op(s) on its {_mib(4 * n)} result: eager makes ≈{ops} more pass(es) over it "
            f"({_mib(passes)}), a fused tail one ({_mib(8 * n)})"
        )
    return (
        f"{tuple(spec['out_shape'])}, ≈{ops} pointwise op(s): eager moves ≈{_mib(passes)}, one fused pass "
        f"{_mib(_bytes_once(spec))}"
    )


def _gflop(s: Shape) -> str:
    flops = (load(s.spec).get("flops") or 0) if s.spec else 0
    return f"{flops / 1e9:.3g} GFLOP" if flops else "most"


def _ops(s: Shape) -> int:
    return pointwise_ops(load(s.spec)) if s.spec else 1


BASE: dict[str, Callable[[Params, Shape], str]] = {
    "elementwise_cuda": lambda p, s: (
        f"memory-bound: eager launches ≈{_ops(s)} kernels, each reading and writing the whole tensor; one kernel "
        f"reads each operand once and writes once, so expect up to ≈{_ops(s)}× vs eager and about torch.compile "
        "(which fuses too) once near the copy bandwidth"
    ),
    "elementwise_cpu": lambda p, s: (
        f"eager runs ≈{_ops(s)} single-op loops over memory, each with its own dispatch and temporary; one OpenMP + "
        "SIMD C pass with polynomial transcendental functions saves the passes and the allocations: expect "
        f"≈{min(_ops(s), 4)}× or more vs eager on a multi-op chain"
    ),
    "epilogue_cuda": lambda p, s: (
        "the heavy op stays in the vendor library (the fastest fp32 GEMM/convolution there is); its "
        f"≈{_ops(s)} pointwise tail op(s) become one pass over its output instead of ≈{_ops(s)}: the gain is the "
        "tail's share of eager's time"
    ),
    "epilogue_cuda_half": lambda p, s: (
        f"the convolution is {_gflop(s)} of the time: cuDNN runs an fp32 convolution at TF32 by default "
        "(torch.backends.cudnn.allow_tf32), and fp16 operands keep TF32's 10-bit mantissa at twice its tensor-core "
        "rate and half its bytes; the tail reads the fp16 result and writes the fp32 output once (fp16's range ends "
        "at 65504: the checks on the problem's inputs decide)"
    ),
    "epilogue_cuda_bf16x3": lambda p, s: (
        f"the linear layer is {s.flops / 1e9:.3g} GFLOP of the time: cuBLAS fp32 runs it on the CUDA cores, this "
        "GEMM on bf16 tensor cores with three products of split operands (16 bits of each, far inside 1e-2; "
        "2.3-2.4× cuBLAS fp32 on 4096² on the H200, 2.0× eager on gemm_bias_relu), and the tail then takes one "
        "pass over its output"
    ),
    "epilogue_cuda_wgmma": lambda p, s: (
        f"the linear layer is {s.flops / 1e9:.3g} GFLOP of the time: cuBLAS fp32 runs it on the CUDA cores, this "
        "GEMM on bf16 tensor cores with three products of split operands, by wgmma straight from shared memory, "
        "and the tail then takes one pass over its output: measured 3.9-4.0× eager on gemm_bias_relu "
        "(8192×4096×4096) on the H200, where mma.sync's version ran 2.0×"
    ),
    "epilogue_cpu": lambda p, s: (
        f"the heavy op stays in torch's CPU library; the ≈{_ops(s)} tail op(s) become one OpenMP + SIMD pass, in "
        "place on its output: the gain is the tail's share of eager's time"
    ),
}


def _more_or_less(old: Any, new: Any, more: str, less: str) -> str:
    return more if new > old else less


def _bias_text(o: Any, n: Any, p: Params, s: Shape) -> str:
    if n == "tail":
        return (
            "the library computes the plain product (no bias broadcast into its output first) and the tail kernel "
            "adds the bias while the output is in registers anyway"
        )
    return "the library adds the bias itself (cuBLASLt / cuDNN fuse it into the heavy op)"


CHANGES: dict[tuple[str, str], Callable[[Any, Any, Params, Shape], str]] = {}
# The tail kernel's shape, alike whether the heavy op is the library's or one of our GEMMs.
for _name in ("elementwise_cuda", "epilogue_cuda", "epilogue_cuda_half", "epilogue_cuda_bf16x3", "epilogue_cuda_wgmma"):
    CHANGES |= {
        (_name, "block"): lambda o, n, p, s: (
            f"{n}-thread blocks: {-(-s.elements // (n * p['items'] * (4 if p['vec4'] else 1)))} blocks for "
            f"{H200_SMS} SMs; " + _more_or_less(o, n, "fewer, larger blocks", "more blocks, finer load balance")
        ),
        (_name, "items"): lambda o, n, p, s: (
            f"{n} {'float4' if p['vec4'] else 'float'}(s) per thread in flight: "
            + _more_or_less(o, n, "more bytes in flight to hide DRAM latency", "fewer registers, more threads")
        ),
        (_name, "vec4"): lambda o, n, p, s: (
            "128-bit loads and stores (a quarter of the memory instructions) when every full operand is aligned"
            if n
            else "scalar accesses: simpler code, four times the memory instructions"
        ),
        (_name, "grid"): lambda o, n, p, s: (
            "a grid that covers the tensor: no loop, every block does one chunk"
            if n == 0
            else f"{n} wave(s) of resident blocks looping over the tensor: no tail wave, block start-up paid once"
        ),
        (_name, "fast_math"): lambda o, n, p, s: (
            "__expf/__logf/__fdividef (ex2/lg2.approx): a few instructions instead of dozens per transcendental, "
            "~2 ulp, far within 1e-2; matters once the chain is compute-heavy"
            if n
            else "full-precision expf/logf/tanhf and IEEE division"
        ),
    }
for _name in ("elementwise_cpu", "epilogue_cpu"):
    CHANGES |= {
        (_name, "parallel"): lambda o, n, p, s: (
            f"{s.elements} elements over the cores (single-threaded below 32768 anyway)"
            if n
            else "one thread: no OpenMP fork/join (~2-5 µs), only a win on tiny tensors"
        ),
        (_name, "binding"): lambda o, n, p, s: (
            "a METH_FASTCALL extension call costs ~1.3 µs instead of ~8 µs for ctypes with cold caches"
            if n == "cext"
            else "ctypes marshals through libffi, ~7 µs more per call: a fallback, rarely faster"
        ),
        (_name, "vec"): lambda o, n, p, s: _more_or_less(
            o,
            n,
            "16-wide (AVX-512) vectors halve the instructions per element",
            "8-wide (AVX2) vectors avoid AVX-512 clock limits",
        ),
        (_name, "chunk"): lambda o, n, p, s: (
            "one contiguous range per thread: no scheduling at all"
            if n == 0
            else f"tasks of {n} elements ({_mib(4 * n)}): {-(-s.elements // n)} tasks, finer balance"
        ),
    }
# The wgmma GEMM's own parameters (bn, stages, fused) have their reasons in words.py, beside the matmul's.
CHANGES |= {
    ("epilogue_cuda_wgmma", "tail"): lambda o, n, p, s: (
        "the GEMM applies the tail to each output value before storing it: the output is written once and never "
        "read back, one launch instead of two (the tail's pass: 62.7 of gemm_bias_relu's 1398 µs on the H200)"
        if n == "gemm"
        else "the tail as a kernel of its own after the GEMM: one more pass over the output, any operand allowed"
    ),
}
for _name in ("epilogue_cuda", "epilogue_cuda_half", "epilogue_cpu"):
    CHANGES[(_name, "bias")] = _bias_text
# What each tile of the channels-last tail changes (shared memory: channels x (positions + 1) floats).
_TILE_WORDS = {
    "32x64": "the smallest tile (8.1 KiB of shared memory a block): the most blocks resident",
    "64x64": "64 channels a position: each position's read a 128-byte run of fp16 (16.3 KiB a block)",
    "32x128": "128 positions a channel: each channel's write a 512-byte run of fp32 (16.1 KiB a block)",
}
CHANGES[("epilogue_cuda_half", "tile")] = lambda o, n, p, s: f"{_tile_text({'tile': n})} tiles: {_TILE_WORDS[n]}"
CHANGES[("epilogue_cuda_half", "cast")] = lambda o, n, p, s: (
    "the input's fp16 channels-last copy by our kernel: 32-channel x 64-position tiles through shared memory, read "
    "along the positions and written along the channels"
    if n == "kernel"
    else "the input's fp16 channels-last copy by torch's cast, a general strided copy"
)
CHANGES[("epilogue_cuda_half", "layout")] = lambda o, n, p, s: (
    "channels-last copies of the operands, the order cuDNN's tensor-core convolutions work in (torch.compile converts "
    "to it too); the tail reads the result in that order and writes the reference's through a tile in shared memory"
    if n == "nhwc"
    else "the operands in the reference's order: cuDNN converts around its kernels itself, and the tail is a plain "
    "streaming pass"
)
for _name in ("epilogue_cuda", "epilogue_cpu", "epilogue_cuda_bf16x3", "epilogue_cuda_wgmma"):
    CHANGES[(_name, "inplace")] = lambda o, n, p, s: (
        "the tail overwrites the heavy op's output: no second buffer, the same lines read and written"
        if n
        else "a separate output buffer: no aliasing (restrict holds), one more allocation"
    )
