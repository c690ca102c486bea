"""The template catalog: every template's parameter space, and how to describe a point of it in words.

A template is one kernel strategy for one family on one device; its parameters are discrete, ordered
value lists. Parameters marked ``structural`` change the algorithm (threading, passes, binding, stats);
the others tune it (block size, vector width, unroll, tiles). The planner (``agents.builtin.search``)
moves structurally while a candidate is far from its roofline and tunes once it is close.
"""

from __future__ import annotations

from agents.builtin import (
    catalog_elementwise,
    catalog_reduce,
    templates_cuda_mma,
    templates_cuda_onchip,
    templates_layernorm_cpu,
    templates_layernorm_cuda,
    templates_layernorm_rows_cuda,
    templates_matmul_bf16x3,
    templates_matmul_bulk,
    templates_matmul_cpu,
    templates_matmul_simt,
    templates_matmul_tiled,
    templates_matmul_wgmma,
    templates_softmax_cpu,
    templates_softmax_cuda,
)
from agents.builtin.shape import Shape
from agents.builtin.template import Param, Params, Template

# ------------------------------------------------------------------------------------- descriptions


def _binding(p: Params) -> str:
    return "called through a tiny CPython extension" if p["binding"] == "cext" else "called through ctypes"


def _log_prefix(p: Params) -> str:
    return "log-softmax, " if p.get("op") == "log_softmax" else ""


def _softmax_cpu_text(p: Params) -> str:
    if p.get("op") == "log_softmax":
        return _log_softmax_cpu_text(p)
    algo = {
        "three_pass": "three passes per row (max; exp, store and sum; scale)",
        "online_store": "online max/sum by L1-sized blocks, exps stored against the running max, then one "
        "rescaling pass (x read once from memory)",
        "online_recompute": "an online max/sum pass that stores nothing, then exp(x - max) / sum written once"
        + (" with non-temporal stores" if p["stream"] else ""),
    }[p["algorithm"]]
    if p["parallel"]:
        threads = "OpenMP over rows" + (
            f" ({p['rows_per_task']} rows per task)" if p["rows_per_task"] else " (one contiguous range per thread)"
        )
    else:
        threads = "one thread"
    prefetch = f", prefetching the row {p['prefetch']} ahead during the exp pass" if p["prefetch"] else ""
    return (
        f"{threads}, {algo}, {p['vec']}-wide SIMD exp (Cephes polynomial) with {p['unroll']} accumulators"
        f"{prefetch}; {_binding(p)}"
    )


def _log_softmax_cpu_text(p: Params) -> str:
    algo = {
        "three_pass": "three passes per row (max; sum of exp; (x - max) - log(sum) written)",
        "online_recompute": "an online max/sum pass by L1-sized blocks (x read once from memory), then "
        "(x - max) - log(sum) written once" + (" with non-temporal stores" if p["stream"] else ""),
    }[p["algorithm"]]
    threads = "OpenMP over rows" if p["parallel"] else "one thread"
    return f"log-softmax, {threads}, {algo}, {p['vec']}-wide SIMD exp with {p['unroll']} accumulators; {_binding(p)}"


def _layernorm_cpu_text(p: Params) -> str:
    threads = {
        "rows": "OpenMP over rows",
        "split": f"OpenMP over chunks of {p['chunk']} elements of every row, statistics merged per row",
        "none": "one thread",
    }[p["parallel"]]
    stats = (
        "one-pass statistics (L1-sized blocks, merged with Chan's formula)"
        if p["stats"] == "welford"
        else "two-pass statistics (mean, then squared deviations)"
    )
    return f"{threads}, {stats}, {p['vec']}-wide SIMD with {p['unroll']} accumulators; {_binding(p)}"


def _matmul_cpu_text(p: Params) -> str:
    threads = "OpenMP over balanced row blocks" if p["threads"] == "all" else "one thread"
    return (
        f"cache-blocked GEMM (KC={p['kc']}, MC={p['mc']}, NC={p['nc']}, packed panels), "
        f"{p['mr']}x{p['nv'] * p['vec']} register micro-tile of {p['vec']}-wide vectors, {threads}; {_binding(p)}"
    )


def _softmax_block_text(p: Params) -> str:
    rows = (
        f"rows of up to {p['block'] * p['items']} elements held in registers (one read), longer rows streamed twice"
        if p["items"]
        else "online max/sum pass then a normalising pass"
    )
    return (
        f"{_log_prefix(p)}one {p['block']}-thread block per row, {rows}, {'float4' if p['vec4'] else 'scalar'} "
        f"accesses, {'__expf' if p['fast_exp'] else 'expf'}"
    )


def _softmax_warp_text(p: Params) -> str:
    rows = (
        f"rows of up to {32 * p['items']} elements held in registers (one read)"
        if p["items"]
        else "online max/sum pass then a normalising pass"
    )
    return (
        f"{_log_prefix(p)}one warp per row ({p['rows_per_block']} rows per block, shuffle-only reductions), {rows}, "
        f"{'float4' if p['vec4'] else 'scalar'} accesses, {'__expf' if p['fast_exp'] else 'expf'}"
    )


def _layernorm_block_text(p: Params) -> str:
    stats = "Welford statistics (one read)" if p["stats"] == "welford" else "two-pass statistics (two reads)"
    return (
        f"one {p['block']}-thread block per row, {stats}, then one normalising pass, "
        f"{'float4' if p['vec4'] else 'scalar'} accesses"
    )


def _layernorm_split_text(p: Params) -> str:
    return (
        f"{p['split']} blocks of {p['block']} threads per row: a Welford partial per chunk, then a second kernel "
        f"merges the row's partials and normalises its chunk, {'float4' if p['vec4'] else 'scalar'} accesses"
    )


def _matmul_cuda_text(p: Params) -> str:
    threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return (
        f"shared-memory tiled SIMT GEMM, {p['bm']}x{p['bn']} block tile, BK={p['bk']}, {threads} threads each "
        f"holding a {p['tm']}x{p['tn']} fp32 micro-tile"
    )


def _matmul_simt_text(p: Params) -> str:
    threads = templates_matmul_simt.threads(p)
    return (
        f"pipelined SIMT GEMM (fp32 FFMA, no tensor cores), {p['bm']}x{p['bn']} block tile, BK={p['bk']}, "
        f"{threads} threads of {p['tm']}x{p['tn']} outputs in four quadrants: the next K step's tile loaded into "
        "registers while this one is multiplied, two shared-memory buffers, one barrier per step"
        + (f", {p['min_blocks']} blocks per SM" if p["min_blocks"] > 1 else "")
        + (", odd micro-tile rows multiplied right to left" if p["order"] == "serpentine" else "")
        + (", the next step's first slice read before this step's last is multiplied" if p["early"] else "")
    )


def _matmul_bulk_text(p: Params) -> str:
    threads = templates_matmul_bulk.threads(p)
    return (
        f"SIMT GEMM fed by the bulk-copy engine (fp32 FFMA, no tensor cores), {p['bm']}x{p['bn']} block tile, "
        f"BK={p['bk']}, {threads} threads of {p['tm']}x{p['tn']} outputs in four quadrants: A transposed once, B's "
        + ("tiles through a tensor map" if p["b_tiles"] == "tensor_map" else "tiles packed once")
        + f", each K step's tiles copied {p['stages']} buffers deep while the threads only read shared memory and "
        f"multiply, mbarriers instead of a block barrier, a buffer refilled {p['lag']} step(s) after it was read"
        + (f", {p['min_blocks']} blocks per SM" if p["min_blocks"] > 1 else "")
        + (", odd micro-tile rows multiplied right to left" if p["order"] == "serpentine" else "")
    )


def _matmul_bf16x3_text(p: Params) -> str:
    return (
        "bf16x3 tensor cores (each fp32 operand split once into a bfloat16 part and a bfloat16 remainder, three "
        "mma.sync m16n8k16 products, fp32 accumulation: ~2^-16 relative error, for the relaxed tolerance policy), "
        f"{p['bm']}x{p['bn']} block tile, BK={p['bk']}, {p['warp']} warp tiles, {p['stages']}-stage cp.async "
        "pipeline, fragments by ldmatrix"
        + (", each K step's partial added to the total with rounded fp32 adds" if p["promote"] else "")
        + (f", {p['min_blocks']} blocks per SM" if p["min_blocks"] > 1 else "")
    )


def _matmul_wgmma_text(p: Params) -> str:
    return (
        "bf16x3 on Hopper's warpgroup tensor-core instructions (each fp32 operand split once into a bfloat16 part and "
        "a bfloat16 remainder, three wgmma products a K step read straight from 128-byte-swizzled shared memory, "
        f"fp32 accumulation: ~2^-16 relative error, for the relaxed tolerance policy), 128x{p['bn']} block tile of "
        f"two warpgroups, BK=64, {p['stages']}-stage pipeline"
        + (
            ", the split fused into the GEMM (each K step's fp32 tiles loaded to registers while the previous step "
            "multiplies, split and stored to shared memory: no pass over the operands before it)"
            if p["fused"]
            else " by cp.async from a split pass"
        )
        + (", a K step's wgmma still running while the last step's buffer is refilled" if p["inflight"] else "")
        + (f", block rows grouped by {p['group']}" if p["group"] != 8 else "")
    )


def _softmax_cluster_text(p: Params) -> str:
    stream = ", evict-first streaming loads and stores" if p["stream"] else ""
    return (
        f"each row split over a cluster of {p['cluster']} blocks of {p['block']} threads, {p['items']} float4 per "
        f"thread held in registers (rows up to {templates_cuda_onchip.softmax_capacity(p)} elements read once, "
        f"written once, one exp per element); the blocks merge their (max, sum) through distributed shared "
        f"memory{stream}"
    )


def _layernorm_persistent_text(p: Params) -> str:
    if p["hold"] == 2:
        reread = "x's chunk held in shared memory (two rows' buffers: the next row fetched whole over the wait)"
    elif p["hold"] == 3:
        reread = (
            "x's chunk held in shared memory (three rows' buffers: the next two rows in flight, row r + 1's "
            "statistics before row r is normalised, the weight read from L2 each row)"
        )
    else:
        staged = (
            f", the next row's first {p['stage']} float4 a thread fetched into shared memory over the wait"
            if p["stage"]
            else ""
        )
        reread = f"x re-read from L2 to normalise{staged}"
    hints = ("; an L2 hint drops y" if p["hold"] else "; L2 hints keep x between its two reads") if p["hints"] else ""
    weight = "the weight (shared memory) and " if p["hold"] != 3 else ""
    return (
        f"a persistent cooperative grid ({p['per_sm']} block(s) of {p['block']} threads per SM) holds {weight}the "
        f"bias (registers, {p['items']} float4 a thread) on chip for the whole call; rows one at a time: block sums "
        f"merged through an arrival counter, {reread}{hints}"
    )


def _layernorm_wide_text(p: Params) -> str:
    order = "last row first (the rows the first kernel read last are still in L2)" if p["tail_first"] else "in order"
    return (
        f"two kernels for few long rows: {p['split']} blocks of {p['block']} threads per row sum x and x² "
        f"(shifted by the row's first element, {p['unroll']} float4 loads in flight), then a column-tiled kernel "
        f"loads its tile of weight and bias once and normalises it for {p['rows_per_block']} rows, {order}"
    )


def _matmul_mma_text(p: Params) -> str:
    if p["split"] == 1:
        math_ = "TF32 tensor cores (mma.sync m16n8k8; ~1e-3 relative error, for the relaxed tolerance policy only)"
    else:
        math_ = (
            "3xTF32 tensor cores (each operand split into a TF32 part and a TF32 remainder, three products: "
            "fp32-level accuracy)"
        )
        if p["promote"]:
            math_ += ", each K step's partial added to the total with rounded fp32 adds"
    return (
        f"{math_}, {p['bm']}x{p['bn']} block tile, BK={p['bk']}, {p['warp']} warp tiles, "
        f"{p['stages']}-stage cp.async pipeline"
    )


# --------------------------------------------------------------------------------------- validity


def _tiles_divide(p: Params, s: Shape) -> bool:
    """A tiled GEMM's block tile and K step divide the problem's M, N and K (its kernels take no ragged edges)."""
    return s.m % p["bm"] == 0 and s.n % p["bn"] == 0 and s.k % p["bk"] == 0


H200_SMS = 132  # the persistent templates size their grid by the GPU's SMs; the planner assumes an H100/H200


def _layernorm_persistent_valid(p: Params) -> bool:
    threads = p["block"] * p["per_sm"]
    smem = templates_layernorm_cuda.persistent_smem(p)
    # The bias's chunk lives in registers (4 a float4) beside ~32 of working registers; the weight's chunk and
    # the staged slots share the SM's 228 KiB of shared memory (1 KiB of it reserved per block).
    return (
        threads <= 2048
        and 4 * p["items"] + 32 <= 65536 // threads
        and (p["hold"] or p["stage"] <= p["items"])
        and p["per_sm"] * (smem + 1024) <= 228 * 1024
    )


def _matmul_cpu_valid(p: Params) -> bool:
    tile = p["mr"] * p["nv"]
    return 8 <= tile <= 24 and p["mc"] >= p["mr"]


def _matmul_cuda_valid(p: Params) -> bool:
    threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return (
        64 <= threads <= 1024
        and threads % 32 == 0
        and (p["bm"] * p["bk"]) % threads == 0
        and (p["bk"] * p["bn"]) % threads == 0
    )


# --------------------------------------------------------------------------------------- templates

_BIND = Param("binding", ("cext", "ctypes"), "cext", structural=True)  # how Python calls the C function

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "softmax_cpu",
            "softmax",
            "cpu",
            (
                Param("algorithm", ("three_pass", "online_store", "online_recompute"), "three_pass", structural=True),
                Param("parallel", (True, False), True, structural=True),
                _BIND,
                Param("vec", (8, 16), 16),
                Param("unroll", (1, 2, 4), 2),
                Param("prefetch", (0, 1, 2, 4), 1),
                Param("rows_per_task", (0, 1, 4, 16), 0),
                Param("stream", (False, True), False),
            ),
            templates_softmax_cpu.render_softmax,
            _softmax_cpu_text,
            # Log-softmax stores no exps: online_store would be online_recompute again.
            valid=lambda p: not (p.get("op") == "log_softmax" and p["algorithm"] == "online_store"),
            irrelevant=lambda p: (
                (("rows_per_task",) if not p["parallel"] else ())
                + (("stream",) if p["algorithm"] != "online_recompute" else ())
            ),
            extras=("op",),  # "log_softmax"
        ),
        Template(
            "layernorm_cpu",
            "layernorm",
            "cpu",
            (
                Param("parallel", ("rows", "split", "none"), "rows", structural=True),
                Param("stats", ("welford", "two_pass"), "welford", structural=True),
                _BIND,
                Param("vec", (8, 16), 16),
                Param("unroll", (1, 2, 4), 2),
                Param("chunk", (1024, 4096, 16384, 65536), 4096),
            ),
            templates_layernorm_cpu.render_layernorm,
            _layernorm_cpu_text,
            irrelevant=lambda p: ("chunk",) if p["parallel"] != "split" else (),
            extras=("eps",),
        ),
        Template(
            "matmul_cpu",
            "matmul",
            "cpu",
            (
                Param("threads", ("all", "one"), "all", structural=True),
                _BIND,
                Param("vec", (8, 16), 16),
                Param("mr", (4, 6, 8, 12), 6),
                Param("nv", (1, 2, 3, 4), 2),
                Param("kc", (128, 256, 512), 256),
                Param("mc", (48, 96, 192, 384), 192),
                Param("nc", (256, 1024, 4096), 1024),
            ),
            templates_matmul_cpu.render_matmul,
            _matmul_cpu_text,
            valid=_matmul_cpu_valid,
            extras=("spec",),  # which operands the problem transposes
        ),
        Template(
            "softmax_cuda_block",
            "softmax",
            "cuda",
            (
                Param("block", (128, 256, 512, 1024), 512),
                Param("vec4", (True, False), True),
                Param("fast_exp", (False, True), False),
                Param("items", (0, 4, 8, 16, 32), 0, structural=True),
            ),
            templates_softmax_cuda.render_softmax_block,
            _softmax_block_text,
            valid=lambda p: p["block"] * p["items"] <= 16384,
            extras=("op",),  # "log_softmax"
        ),
        Template(
            "softmax_cuda_warp",
            "softmax",
            "cuda",
            (
                Param("rows_per_block", (1, 2, 4, 8), 4),
                Param("vec4", (True, False), True),
                Param("fast_exp", (False, True), False),
                Param("items", (0, 4, 8, 16, 32), 0, structural=True),
            ),
            templates_softmax_cuda.render_softmax_warp,
            _softmax_warp_text,
            extras=("op",),  # "log_softmax"
        ),
        Template(
            "layernorm_cuda_block",
            "layernorm",
            "cuda",
            (
                Param("block", (128, 256, 512, 1024), 512),
                Param("vec4", (True, False), True),
                Param("stats", ("welford", "two_pass"), "welford", structural=True),
            ),
            templates_layernorm_rows_cuda.render_layernorm_block,
            _layernorm_block_text,
            extras=("eps",),
        ),
        Template(
            "layernorm_cuda_split",
            "layernorm",
            "cuda",
            (
                Param("block", (256, 512, 1024), 512),
                Param("vec4", (True, False), True),
                Param("split", (4, 8, 16, 32, 64, 128), 32),
            ),
            templates_layernorm_rows_cuda.render_layernorm_split,
            _layernorm_split_text,
            extras=("eps",),
        ),
        Template(
            "matmul_cuda_tiled",
            "matmul",
            "cuda",
            (
                Param("bm", (32, 64, 128), 64),
                Param("bn", (32, 64, 128), 64),
                Param("bk", (8, 16, 32), 16),
                Param("tm", (4, 8), 4),
                Param("tn", (4, 8), 4),
            ),
            templates_matmul_tiled.render_matmul,
            _matmul_cuda_text,
            valid=_matmul_cuda_valid,
            extras=("spec",),  # which operands the problem transposes
        ),
        Template(
            "softmax_cuda_cluster",
            "softmax",
            "cuda",
            (
                Param("cluster", (2, 4, 8), 8, structural=True),
                Param("block", (64, 128, 256, 512), 128),
                Param("items", (4, 8, 16, 32), 16),
                Param("stream", (False, True), False),
            ),
            templates_cuda_onchip.render_softmax_cluster,
            _softmax_cluster_text,
            # 32 float4 per thread is 128 registers of row: only small blocks keep that without spilling.
            valid=lambda p: p["block"] * p["items"] <= 4096,
            extras=("op",),
            runs_on=lambda p, s: s.cols % 4 == 0 and s.cols <= templates_cuda_onchip.softmax_capacity(p),
        ),
        Template(
            "layernorm_cuda_persistent",
            "layernorm",
            "cuda",
            (
                Param("block", (256, 512, 1024), 512),
                Param("per_sm", (1, 2), 1),
                Param("items", (4, 8, 16), 16),
                Param("unroll", (2, 4), 4),
                Param("stage", (0, 2, 4, 8), 8),
                Param("hints", (True, False), True),
                Param("hold", (0, 2, 3), 0),
            ),
            templates_layernorm_cuda.render_layernorm_persistent,
            _layernorm_persistent_text,
            valid=_layernorm_persistent_valid,
            irrelevant=lambda p: ("stage",) if p["hold"] else (),  # the whole next row is fetched
            extras=("eps",),
            runs_on=lambda p, s: s.cols % 4 == 0 and s.cols <= H200_SMS * p["per_sm"] * p["block"] * p["items"] * 4,
        ),
        Template(
            "layernorm_cuda_wide",
            "layernorm",
            "cuda",
            (
                Param("block", (256, 512, 1024), 512),
                Param("split", (8, 16, 32, 64, 128, 256), 32),
                Param("unroll", (1, 2, 4, 8), 2),
                Param("rows_per_block", (1, 2, 4, 8, 16, 32, 64), 16),
                Param("tail_first", (True, False), True),
            ),
            templates_layernorm_cuda.render_layernorm_wide,
            _layernorm_wide_text,
            extras=("eps",),
            runs_on=lambda p, s: s.cols % 4 == 0,
        ),
        Template(
            "matmul_cuda_mma",
            "matmul",
            "cuda",
            (
                Param("split", (1, 3), 3, structural=True),
                Param("bm", (128, 256), 128),
                Param("bn", (128, 256), 128),
                Param("bk", (16, 32), 32),
                Param("warp", ("64x32", "64x64", "32x64"), "64x32"),
                Param("stages", (3, 4), 3),
                Param("promote", (True, False), True),
            ),
            templates_cuda_mma.render_matmul_mma,
            _matmul_mma_text,
            valid=templates_cuda_mma.valid,
            extras=("spec",),  # which operands the problem transposes
            irrelevant=lambda p: ("promote",) if p["split"] == 1 else (),
            runs_on=_tiles_divide,
            policies=("relaxed",),
        ),
        Template(
            "matmul_cuda_bf16x3",
            "matmul",
            "cuda",
            (
                Param("bm", (128, 256), 128),
                Param("bn", (128, 256), 128),
                Param("bk", (32, 64), 32),
                Param("warp", ("64x32", "64x64", "32x64"), "64x32"),
                Param("stages", (2, 3, 4), 3),
                Param("promote", (True, False), True),
                Param("min_blocks", (1, 2), 1),
            ),
            templates_matmul_bf16x3.render_matmul_bf16x3,
            _matmul_bf16x3_text,
            valid=templates_matmul_bf16x3.valid,
            extras=("spec",),  # which operands the problem transposes
            runs_on=_tiles_divide,
            policies=("relaxed",),
        ),
        Template(
            "matmul_cuda_wgmma",
            "matmul",
            "cuda",
            (
                Param("bn", (128, 256), 128),
                Param("stages", (2, 3), 3),
                Param("inflight", (False, True), False),
                Param("group", (8, 16), 8),
                Param("fused", (False, True), False),
            ),
            templates_matmul_wgmma.render_matmul_wgmma,
            _matmul_wgmma_text,
            valid=templates_matmul_wgmma.valid,
            irrelevant=lambda p: ("inflight",) if p["fused"] else (),  # the fused loop keeps a group in flight
            extras=("spec",),  # which operands the problem transposes
            runs_on=lambda p, s: s.m % 128 == 0 and s.n % p["bn"] == 0 and s.k % 64 == 0,
            policies=("relaxed",),
        ),
        Template(
            "matmul_cuda_simt",
            "matmul",
            "cuda",
            (
                Param("bm", (64, 128, 256), 128),
                Param("bn", (64, 128, 256), 128),
                Param("bk", (8, 16), 8),
                Param("tm", (8, 16), 8),
                Param("tn", (8, 16), 8),
                Param("min_blocks", (1, 2, 4), 2),
                Param("order", ("rows", "serpentine"), "rows"),
                Param("early", (False, True), False),
            ),
            templates_matmul_simt.render_matmul_simt,
            _matmul_simt_text,
            valid=templates_matmul_simt.valid,
            extras=("spec",),  # which operands the problem transposes
            runs_on=_tiles_divide,
        ),
        Template(
            "matmul_cuda_bulk",
            "matmul",
            "cuda",
            (
                Param("bm", (64, 128, 256), 128),
                Param("bn", (64, 128, 256), 128),
                Param("bk", (8, 16, 32), 32),
                Param("tm", (8, 16), 8),
                Param("tn", (8, 16), 8),
                Param("stages", (2, 3, 4, 6), 3),
                Param("lag", (1, 2), 1),
                Param("min_blocks", (1, 2), 2),
                Param("b_tiles", ("packed", "tensor_map"), "tensor_map"),
                Param("order", ("rows", "serpentine"), "serpentine"),
            ),
            templates_matmul_bulk.render_matmul_bulk,
            _matmul_bulk_text,
            valid=templates_matmul_bulk.valid,
            extras=("spec",),  # which operands the problem transposes
            runs_on=lambda p, s: s.m % p["bm"] == 0 and s.n % p["bn"] == 0 and s.k % 32 == 0,
        ),
    )
}


def templates_for(family: str, device: str) -> list[Template]:
    return [t for t in TEMPLATES.values() if t.family == family and t.device == device]


def describe(template: str, params: Params) -> str:
    """One plain-language line for a (template, params) point."""
    t = TEMPLATES[template]
    return t.describe(t.normalise(params))


def render(template: str, params: Params, device: str) -> str:
    """The full candidate source for one point of one template."""
    t = TEMPLATES.get(template)
    if t is None:
        raise ValueError(f"unknown template {template!r} (known: {', '.join(sorted(TEMPLATES))})")
    if t.device != device:
        raise ValueError(f"template {template!r} targets {t.device}, not {device}")
    point = t.normalise(dict(params))
    what = t.describe(point)
    return t.renderer(point, what[:1].upper() + what[1:] + ".")


# ------------------------------------------------------------------- families in their own modules

# Reductions over a dim and RMSNorm (catalog_reduce.py); fused pointwise chains and heavy op + pointwise tail
# (catalog_elementwise.py).
TEMPLATES.update({t.name: t for t in catalog_reduce.TEMPLATES})
TEMPLATES.update({t.name: t for t in catalog_elementwise.TEMPLATES})
