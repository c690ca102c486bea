"""Fused pointwise kernels on CUDA (NVRTC through CuPy): ``elementwise_cuda``, ``epilogue_cuda``,
``epilogue_cuda_half`` (a convolution by cuDNN in fp16, then the tail into fp32), ``epilogue_cuda_bf16x3`` (a
linear layer by ``templates_matmul_bf16x3``'s GEMM, then the tail) and ``epilogue_cuda_wgmma`` (the same by
``templates_matmul_wgmma``'s).

A grid-stride kernel, float4 loads and stores when every full operand and the output are 16-byte aligned
(a scalar kernel otherwise), ITEMS vectors per thread in flight, 32-bit index math whenever the tensor
allows (64-bit otherwise), broadcast operands read at ``(i / inner) % size``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin import templates_matmul_wgmma
from agents.builtin._text import c_bool, c_params, fill, wrap
from agents.builtin.templates_elementwise_expression import Expression, long_chain
from agents.builtin.templates_elementwise_gemm_tail import render_gemm_tail
from agents.builtin.templates_elementwise_math import BAND_INDEX_CU, COMMON, CUDA_MATH, HALF_CU, index_typed
from agents.builtin.templates_elementwise_nhwc import render_nhwc
from agents.builtin.templates_elementwise_python import (
    CONSTANTS_PY,
    DOC_PY,
    MODEL_PY,
    Params,
    candidate_fields,
    prepare,
    py_tuple,
    spec_of,
)
from agents.builtin.templates_matmul_bf16x3 import LINEAR_BF16X3_PY, mm_module_py

CUDA_KERNEL = c_params(r"""
// Fused pointwise chain: out[i] = ew_apply(full operands at i, broadcast operands at (i / inner) % size).
@SUMMARY_C@
#param BLOCK        // threads per block
#param ITEMS          // vectors (float4, or floats in the scalar kernel) per thread in flight
#param VEC            // also build the float4 kernels (used when every full operand is 16-byte aligned)
#ifndef FAST_MATH
#define FAST_MATH @FAST@      // __expf / __logf / __fdividef instead of the full-precision functions
#endif
#param INPLACE        // the output is the first full operand's buffer (the heavy op's result)
#if INPLACE
#define ALIAS                // read and written through two pointers: no __restrict__ on either
#else
#define ALIAS __restrict__
#endif
@MATH@
@COMMON@
@APPLY@
@BAND_INDEX@

template <typename I>
__device__ __forceinline__ void scalar_body(@PARAMS_T@, float* ALIAS y, I n)
{
    const I stride = (I)gridDim.x * (BLOCK * ITEMS);
    for (I base = (I)blockIdx.x * (BLOCK * ITEMS) + threadIdx.x; base < n; base += stride) {
@DECL_S@
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n) {
@LOAD_S@
            }
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n) y[i] = ew_apply(@CALL_S@);
        }
    }
}

#if VEC
template <typename I>
__device__ __forceinline__ void vec_body(@PARAMS_T@, float* ALIAS y, I n)
{
    const I n4 = n / 4;
    const I stride = (I)gridDim.x * (BLOCK * ITEMS);
    for (I base = (I)blockIdx.x * (BLOCK * ITEMS) + threadIdx.x; base < n4; base += stride) {
@DECL_V@
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n4) {
@LOAD_V@
            }
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const I i = base + (I)k * BLOCK;
            if (i < n4) {
                const I e = 4 * i;
                float4 r;
                r.x = ew_apply(@CALL_X@);
                r.y = ew_apply(@CALL_Y@);
                r.z = ew_apply(@CALL_Z@);
                r.w = ew_apply(@CALL_W@);
                reinterpret_cast<float4*>(y)[i] = r;
            }
        }
    }
    // The last n % 4 elements, one thread each.
    if (blockIdx.x == 0 && (I)threadIdx.x < n - 4 * n4) {
        const I i = 4 * n4 + threadIdx.x;
        y[i] = ew_apply(@CALL_S_TAIL@);
    }
}
#endif

@ENTRIES@
""")

CUDA_PY = (
    DOC_PY
    + r'''
@IMPORTS@

CUDA_SRC = r"""@CUDA_SRC@"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
@STREAM_PY@
@FUNCTION_PY@
@HEAVY_PY@
_BLOCK, _ITEMS, _WAVES, _VEC = @BLOCK@, @ITEMS@, @WAVES@, @VEC_PY@
_RESIDENT = max(1, 2048 // _BLOCK)  # blocks of _BLOCK threads one SM holds (2048 threads on H100/H200)
'''
    + CONSTANTS_PY
    + r"""
def _launch(n: int, full: tuple[int, ...], bands: tuple[int, ...], y: int, device: torch.device) -> None:
    aligned = _VEC and all(p % 16 == 0 for p in (*full, y))
    per_block = _BLOCK * _ITEMS * (4 if aligned else 1)
    blocks = -(-n // per_block)
    if _WAVES:  # a grid-stride loop over a fixed number of resident-block waves
        blocks = min(blocks, _WAVES * _sm_count(device) * _RESIDENT)
    wide = n + 2 * blocks * per_block >= 2**31  # 32-bit index math whenever it cannot overflow
    index = cupy.int64 if wide else cupy.uint32
    name = ("ew_vec" if aligned else "ew_scalar") + ("_i64" if wide else "_i32")
    args = (*full, *(index(a) if k % 3 else a for k, a in enumerate(bands)), y, index(n))
    _run_kernel(_function(name), device, (blocks,), (_BLOCK,), args)

"""
    + MODEL_PY
)


def _cuda_kernel(spec: dict[str, Any], params: Params, summary: str, inplace: bool, half: bool = False) -> str:
    """``half``: the heavy op's result (a full operand) is fp16; every other operand and the output are fp32."""
    e = Expression(spec)
    # A long chain is called, not inlined: inlined into the four lanes of four entry points it takes NVRTC
    # seconds (measured 4.8 s against 0.6 s for a 200-op chain), and a call costs little beside such a body.
    apply = e.function("__device__ __noinline__" if long_chain(spec) else "EW_FN")
    nf, nb = len(e.full), len(e.bands)
    halves = {k for k, j in enumerate(e.full) if half and e.leaves[j]["kind"] == "heavy"}

    def pointer(k: int) -> str:
        return f"const {'unsigned short' if k in halves else 'float'}* {'ALIAS' if k == 0 else '__restrict__'} f{k}"

    def at(k: int, i: str) -> str:
        return f"half_float(f{k}[{i}])" if k in halves else f"f{k}[{i}]"

    def at4(k: int, i: str) -> str:
        kind = "uint2" if k in halves else "float4"
        value = f"reinterpret_cast<const {kind}*>(f{k})[{i}]"
        return f"half4_float4({value})" if k in halves else value

    params_t = ", ".join(
        [pointer(k) for k in range(nf)] + [f"const float* __restrict__ b{k}, I inner{k}, I size{k}" for k in range(nb)]
    )

    def bands_at(index: str) -> list[str]:
        return [f"b{k}[band_index<I>({index}, inner{k}, size{k})]" for k in range(nb)]

    decl_s = "\n".join(f"        float v{k}[ITEMS];" for k in range(nf))
    load_s = "\n".join(f"                v{k}[k] = {at(k, 'i')};" for k in range(nf))
    decl_v = "\n".join(f"        float4 v{k}[ITEMS];" for k in range(nf))
    load_v = "\n".join(f"                v{k}[k] = {at4(k, 'i')};" for k in range(nf))

    def call(values: list[str], index: str) -> str:
        return ", ".join(values + bands_at(index))

    entries = []
    call_args = ", ".join([f"f{k}" for k in range(nf)] + [f"b{k}, inner{k}, size{k}" for k in range(nb)] + ["y", "n"])
    for kind in ("scalar", "vec"):
        for suffix, ctype in (("i32", "unsigned int"), ("i64", "long long")):
            sig = index_typed(params_t, ctype)
            entry = (
                f'extern "C" __global__ void __launch_bounds__(BLOCK)\new_{kind}_{suffix}({sig}, float* ALIAS y, '
                f"{ctype} n)\n{{\n    {kind}_body<{ctype}>({call_args});\n}}\n"
            )
            entries.append(entry if kind == "scalar" else f"#if VEC\n{entry}#endif\n")
    return fill(
        CUDA_KERNEL,
        SUMMARY_C=wrap(summary, "// "),
        BLOCK=params["block"],
        ITEMS=params["items"],
        VEC=c_bool(params["vec4"]),
        FAST=c_bool(params["fast_math"]),
        INPLACE=c_bool(inplace),
        MATH=CUDA_MATH,
        COMMON=COMMON + (HALF_CU if halves else ""),
        BAND_INDEX=BAND_INDEX_CU,
        APPLY=apply,
        PARAMS_T=params_t,
        DECL_S=decl_s,
        LOAD_S=load_s,
        CALL_S=call([f"v{k}[k]" for k in range(nf)], "i"),
        DECL_V=decl_v,
        LOAD_V=load_v,
        CALL_X=call([f"v{k}[k].x" for k in range(nf)], "e"),
        CALL_Y=call([f"v{k}[k].y" for k in range(nf)], "e + 1"),
        CALL_Z=call([f"v{k}[k].z" for k in range(nf)], "e + 2"),
        CALL_W=call([f"v{k}[k].w" for k in range(nf)], "e + 3"),
        CALL_S_TAIL=call([at(k, "i") for k in range(nf)], "i"),
        ENTRIES="\n".join(entries),
    )


def render_cuda(
    params: Params, summary: str, template: str, epilogue: bool, heavy_py: str = "", half: bool = False
) -> str:
    """``heavy_py``: module-level Python defining ``_linear_bf16x3``, for an epilogue whose heavy op is its own
    GEMM (empty: the heavy op through torch). ``half``: the library's heavy op in fp16, the tail into fp32."""
    spec, inplace, fw = prepare(params, template, epilogue, "cuda")
    lines, full_ptrs, band_args = fw.lines(params, epilogue, own_gemm=bool(heavy_py), half=half)
    lines.append(f"_launch(n, {py_tuple(full_ptrs)}, {py_tuple(band_args)}, out.data_ptr(), out.device)")
    lines.append("return out")
    imports = "import math\n\nimport cupy\nimport torch\nimport torch.nn as nn\n"
    if epilogue:
        imports += "import torch.nn.functional as F\n"
    return fill(
        CUDA_PY,
        IMPORTS=imports,
        CUDA_SRC=_cuda_kernel(spec, params, summary, inplace, half),
        BLOCK=params["block"],
        ITEMS=params["items"],
        WAVES=params["grid"],
        VEC_PY=repr(bool(params["vec4"])),
        HEAVY_PY=heavy_py,
        **candidate_fields(params, summary, template, epilogue, fw, lines, own_gemm=bool(heavy_py), half=half),
    )


def render_elementwise_cuda(params: Params, summary: str) -> str:
    return render_cuda(params, summary, "elementwise_cuda", epilogue=False)


def render_epilogue_cuda(params: Params, summary: str) -> str:
    return render_cuda(params, summary, "epilogue_cuda", epilogue=True)


def render_epilogue_cuda_half(params: Params, summary: str) -> str:
    heavy = (spec_of(params, "epilogue_cuda_half").get("heavy") or {}).get("op")
    if heavy != "conv":
        what = f"its heavy op is a {heavy}" if heavy else "it has no heavy op"
        raise ValueError(f"epilogue_cuda_half renders a convolution's tail; {what}")
    if params["layout"] == "nhwc":
        return render_nhwc(params, summary, "epilogue_cuda_half")
    return render_cuda(params, summary, "epilogue_cuda_half", epilogue=True, half=True)


def gemm_point(params: Params) -> Params:
    """An ``epilogue_cuda_bf16x3`` point's GEMM, as a ``matmul_cuda_bf16x3`` point (128 x 128 blocks)."""
    gemm = {k: params[k] for k in ("warp", "promote", "bk", "stages")}
    return {"bm": 128, "bn": 128, "min_blocks": 1, **gemm}


def render_epilogue_cuda_bf16x3(params: Params, summary: str) -> str:
    heavy = mm_module_py(gemm_point(params), summary, b_col=True) + LINEAR_BF16X3_PY
    return render_cuda(params, summary, "epilogue_cuda_bf16x3", epilogue=True, heavy_py=heavy)


def wgmma_point(params: Params) -> Params:
    """An ``epilogue_cuda_wgmma`` point's GEMM, as a ``matmul_cuda_wgmma`` point."""
    return {"bn": params["bn"], "stages": params["stages"], "inflight": False, "group": 8, "fused": params["fused"]}


def render_epilogue_cuda_wgmma(params: Params, summary: str) -> str:
    if params["tail"] == "gemm":
        return render_gemm_tail(params, summary, wgmma_point(params))
    heavy = templates_matmul_wgmma.mm_module_py(wgmma_point(params), summary, b_col=True) + LINEAR_BF16X3_PY
    return render_cuda(params, summary, "epilogue_cuda_wgmma", epilogue=True, heavy_py=heavy)
