"""Why an idea should help, in words and numbers: the planner's ``expected_gain`` strings.

Each template has a base rationale; each parameter change has its own, computed from the problem's shape
(bytes moved, row size against the caches, blocks against SMs, FMAs per load). Figures quoted as
"measured" come from this project's runs on the CPU twins (2-core Xeon, harness timing with a 64 MiB
cache flush before every call) and from ``bench/RESULTS.md`` for the H200.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.builtin import catalog_elementwise, catalog_reduce, templates_matmul_simt
from agents.builtin.shape import Shape
from agents.builtin.template import Params, Template

FAR_FROM_ROOFLINE = 30.0  # % of roofline under which structural moves come first
H200_SMS = 132


@dataclass(frozen=True)
class Change:
    param: str  # a parameter name, or "template" for a switch of template
    old: Any
    new: Any


def mib(n: float) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**10:.1f} KiB"


def expected_gain(t: Template, p: Params, shape: Shape, change: Change | None, parent: dict[str, Any] | None) -> str:
    lead = ""
    if parent is not None and change is not None:
        pct = parent.get("pct_roofline")
        speed = parent.get("speedup_vs_best")
        known = isinstance(pct, int | float)
        where = f"{pct:.0f}% of roofline" if known else "roofline unknown"
        vs = f", {speed:.2f}× the best reference" if isinstance(speed, int | float) else ""
        plan = "structural moves first" if not known or pct < FAR_FROM_ROOFLINE else "tuning first"
        structural = change.param == "template" or any(q.name == change.param and q.structural for q in t.params)
        lead = f"Parent at {where}{vs} ({plan}); this is a {'structural' if structural else 'tuning'} move. "
    facts = _facts(shape)
    if change is None or change.param == "template":
        why = BASE[t.name](p, shape)
    else:
        rule = CHANGES.get((t.name, change.param)) or CHANGES.get(("*", change.param))
        why = rule(change.old, change.new, p, shape) if rule else f"{change.param} {change.old} → {change.new}"
    return f"{lead}{facts}. {why}."


def _facts(s: Shape) -> str:
    if s.family == "reduce" or s.inner > 1:
        return catalog_reduce.facts(s)
    if s.family in catalog_elementwise.FAMILIES:
        return catalog_elementwise.facts(s)
    if s.family == "matmul":
        size = 4 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n)
        return f"{s.batch}×{s.m}×{s.k}×{s.n}: {s.flops / 1e9:.3g} GFLOP, {mib(size)} of operands and result"
    moved = 8 * s.elements + (8 * s.cols if s.family == "layernorm" else 0)
    return f"{s.rows} rows × {s.cols}: {mib(moved)} read + written once at best; a row is {mib(s.row_bytes)}"


# ----------------------------------------------------------------------------------- base reasons

BASE: dict[str, Callable[[Params, Shape], str]] = {
    "softmax_cpu": lambda p, s: (
        "torch's eager softmax also makes three passes but goes through the dispatcher and a slower exp; one "
        "fused C call with a 16-wide polynomial exp, the next row prefetched and a ~1 µs extension call: "
        "expect 1.2-1.3× vs eager while a row fits in L1/L2 (measured 1.27× on 96×3000)"
    ),
    "layernorm_cpu": lambda p, s: (
        "statistics and normalisation fused per row with vector accumulators and a ~1 µs call, against eager's "
        "dispatch and three allocations: expect ~1.2× on small, overhead-bound inputs (measured 1.21× on "
        "5×2880) and one pass less over memory on large ones"
    ),
    "matmul_cpu": lambda p, s: (
        "a packed register-blocked micro-kernel reaches 130-150 GFLOP/s per core (measured), near MKL; expect "
        "parity with eager on mid-sized products and ~2× vs torch.compile, less on tiny ones where packing shows"
    ),
    "softmax_cuda_block": lambda p, s: (
        "memory-bound: the floor is one read and one write of the tensor; "
        + (
            f"rows of up to {p['block'] * p['items']} elements stay in registers, so they are read once"
            if p["items"] and s.cols <= p["block"] * p["items"]
            else f"an online max/sum reads each row twice ({mib(4 * s.elements)} extra; the second read often hits L2)"
        )
    ),
    "softmax_cuda_warp": lambda p, s: (
        f"{s.cols}-element rows would leave most of a block idle: a warp per row ({s.cols / 32:.0f} elements per "
        "lane) reduces with shuffles only, no __syncthreads, and many rows in flight per SM"
    ),
    "layernorm_cuda_block": lambda p, s: (
        f"memory-bound; one block per row gives {s.rows} blocks for {H200_SMS} SMs"
        + (" (too few: see the split template)" if s.rows < H200_SMS else "")
        + "; Welford reads the row once for statistics and once to normalise"
    ),
    "layernorm_cuda_split": lambda p, s: (
        f"{s.rows} rows would fill only {min(s.rows, H200_SMS)} of {H200_SMS} SMs with one block per row; "
        f"{p['split']} blocks per row give {s.rows * p['split']} blocks of {s.cols / p['split']:.0f} elements, "
        "for a second small kernel and a second read of x"
    ),
    "matmul_cuda_tiled": lambda p, s: (
        f"compute-bound at fp32 SIMT rates; a {p['tm']}x{p['tn']} micro-tile does "
        f"{p['tm'] * p['tn'] / (p['tm'] + p['tn']):.1f} FMAs per shared-memory load and "
        f"{_tiles(p, s)} blocks run on {H200_SMS} SMs: expect 50-80% of cuBLAS fp32"
    ),
    "matmul_cuda_simt": lambda p, s: (
        f"compute-bound at fp32 SIMT rates ({s.flops / 1e9:.3g} GFLOP, no tensor cores: what the strict policy "
        "allows); the tiled kernel's FFMAs wait while each tile loads, here the next tile is in flight while this "
        f"one is multiplied, and {_tiles(p, s)} blocks of {p['tm']}x{p['tn']} micro-tiles read shared memory "
        "without conflicts: measured 0.96× cuBLAS fp32 on 4096² on the H200 (8x8, two blocks an SM, serpentine "
        "order), 1.6× the tiled kernel"
    ),
    "matmul_cuda_bulk": lambda p, s: (
        f"compute-bound at fp32 SIMT rates ({s.flops / 1e9:.3g} GFLOP, no tensor cores: what the strict policy "
        "allows); the SIMT kernel's threads spend ~5% of their instructions staging tiles through registers and "
        "wait at a block barrier every step, here the bulk-copy engine fills the buffers and the threads only read "
        "and multiply: measured 1.01× cuBLAS fp32 on 4096² on an H100 (the GEMM alone 2.5% faster, A's transposing "
        f"pass {mib(4 * s.m * s.k * s.batch)} read and written on top); needs a Hopper GPU (cp.async.bulk)"
    ),
    "matmul_cuda_bf16x3": lambda p, s: (
        f"compute-bound: {s.flops / 1e9:.3g} GFLOP. Three bfloat16 products per multiply-add keep 16 bits of each "
        "operand (TF32 keeps 11 and fails 1e-2 on near-zero outputs of long dot products), and bf16 tensor cores run "
        "~2× the TF32 rate: measured 2.3-2.4× eager on 4096² on the H200, where 3xTF32 ran 1.0×; the split costs "
        f"one pass over A and B ({mib(4 * (s.m * s.k + s.k * s.n) * s.batch)} read, as much written)"
    ),
    "matmul_cuda_wgmma": lambda p, s: (
        f"compute-bound: {s.flops / 1e9:.3g} GFLOP as three bfloat16 products (16 bits of each operand, far inside "
        "1e-2). mma.sync fed the tensor cores from registers at 372 of the 791 TFLOP/s cuBLAS reaches in bf16 on the "
        "H200 (2.4× eager on 4096²); wgmma multiplies 64-row tiles straight from shared memory, asynchronously, as "
        "cuBLAS does: measured 706 TFLOP/s and 3.7-4.0× eager on 4096²; the split costs one pass over A and B "
        f"({mib(4 * (s.m * s.k + s.k * s.n) * s.batch)} read, as much written)"
    ),
    "softmax_cuda_cluster": lambda p, s: (
        f"memory-bound: the floor is one read and one write ({mib(8 * s.elements)}); eager and the two-pass "
        f"kernels read a {mib(s.row_bytes)} row twice. A cluster of {p['cluster']} blocks holds the row in "
        "registers and merges through distributed shared memory, so x is read once: measured 0.57-0.60 ms "
        "(84-87% of the copy floor, 1.6× torch.compile) on 4096×65536 on the H200"
    ),
    "layernorm_cuda_persistent": lambda p, s: (
        f"memory-bound: {s.rows} rows of {mib(s.row_bytes)} are too long for one block and too few for the SMs. "
        + _persistent_on_chip(p, s)
        + "leaves DRAM x once, y once and the weight and bias once; the price is a grid-wide wait per row: measured "
        "0.20 ms on the GPU on 16×(64×256×256) on the H200, against 0.22 ms for the two-kernel wide LayerNorm; on "
        "32×(1024×2048), 0.19 ms held with x in three buffers, 0.20 in two, 0.22 re-read from L2, 0.29 for "
        "torch.compile"
    ),
    "layernorm_cuda_wide": lambda p, s: (
        f"memory-bound: {s.rows} rows of {mib(s.row_bytes)} are too long to hold on chip, so x is read twice "
        f"(statistics, then normalising) and y written once; the split kernel also reads the "
        f"{mib(2 * s.row_bytes)} of weight and bias once per row, this one once per {p['rows_per_block']} rows"
    ),
    "matmul_cuda_mma": lambda p, s: (
        f"compute-bound: {s.flops / 1e9:.3g} GFLOP. "
        + (
            "TF32 tensor cores run ~7× the fp32 SIMT rate (measured 2.9-3.1× eager with this kernel), but "
            "the ~1e-3 relative error can fail 1e-2 where outputs are near zero"
            if p["split"] == 1
            else "three TF32 products per multiply-add keep fp32 accuracy at ~1/3 of the TF32 rate, about the "
            "fp32 SIMT rate: measured 1.0× cuBLAS fp32 on 4096² on the H200 (1.02× with the launch hidden, "
            "2704-2750 µs against 2723 µs beside the bf16x3 kernel)"
        )
    ),
}


def _persistent_on_chip(p: Params, s: Shape) -> str:
    """What the persistent LayerNorm keeps on chip, and per block, for its ``hold``."""

    def per_block(chunks: int) -> str:
        return mib(chunks * s.row_bytes / (H200_SMS * p["per_sm"]))

    if p["hold"] == 3:
        return (
            f"Holding the bias on chip, the weight in L2 and x's chunk in three buffers ({per_block(4)} per block), "
            "with the next two rows fetched over the grid-wide wait, "
        )
    x = (
        "and x's chunk too, two rows of it, with the next row fetched over the grid-wide wait, "
        if p["hold"]
        else "and re-reading x from L2 one row at a time "
    )
    return f"Holding the weight and bias on chip ({per_block(2)} per block) {x}"


def _tiles(p: Params, s: Shape) -> int:
    return s.batch * -(-s.m // p["bm"]) * -(-s.n // p["bn"])


# -------------------------------------------------------------------------------- change reasons


def _more_or_less(old: Any, new: Any, more: str, less: str) -> str:
    return more if new > old else less


def _algorithm(old: Any, new: Any, p: Params, s: Shape) -> str:
    row = mib(s.row_bytes)
    return {
        "three_pass": f"simplest inner loops and one exp per element; the extra passes hit L1/L2 while a row "
        f"({row}) fits",
        "online_store": f"x comes from memory once: each L1-sized block's max and exp run back to back, which "
        f"matters when a row ({row}) spills L2",
        "online_recompute": f"y is written once, with no rescaling pass over it ({mib(4 * s.elements)} less "
        "traffic), for a second exp per element",
    }[new]


def _cpu_parallel(old: Any, new: Any, p: Params, s: Shape) -> str:
    if new is True or new == "rows":
        return f"{s.rows} rows over the cores: up to the core count on the compute-bound part"
    if new == "split":
        return (
            f"chunks of {p.get('chunk', 4096)} elements of every row over the cores: all cores busy even with "
            f"{s.rows} rows, for a second pass over memory"
        )
    return f"no OpenMP fork/join (~2-5 µs): only a win on tiny inputs ({s.elements} elements here)"


CHANGES: dict[tuple[str, str], Callable[[Any, Any, Params, Shape], str]] = {
    ("*", "binding"): lambda o, n, p, s: (
        "a METH_FASTCALL extension call costs ~1.3 µs instead of ~8 µs for ctypes with cold caches (measured "
        "after a 64 MiB flush)"
        if n == "cext"
        else "ctypes marshals through libffi, ~7 µs more per call with cold caches: a fallback, rarely faster"
    ),
    ("*", "vec"): lambda o, n, p, s: _more_or_less(
        o,
        n,
        "16-wide (AVX-512) vectors halve the instructions per element",
        "8-wide (AVX2) vectors avoid AVX-512 clock limits and run natively without AVX-512",
    ),
    ("*", "unroll"): lambda o, n, p, s: _more_or_less(
        o,
        n,
        f"{n} independent accumulators hide the 4-cycle add/max latency",
        f"{n} accumulator(s): fewer registers and a shorter vector tail on {s.cols}-element rows",
    ),
    ("softmax_cpu", "algorithm"): _algorithm,
    ("softmax_cpu", "parallel"): _cpu_parallel,
    ("layernorm_cpu", "parallel"): _cpu_parallel,
    ("softmax_cpu", "prefetch"): lambda o, n, p, s: (
        "no software prefetch: the hardware prefetcher alone"
        if n == 0
        else f"load the row {n} ahead ({mib(s.row_bytes)} each) while this row computes its exps, so its max "
        f"pass finds it in cache; too far ahead evicts the current row from L1 (48 KiB)"
    ),
    ("softmax_cpu", "rows_per_task"): lambda o, n, p, s: (
        "one contiguous range of rows per thread keeps the prefetched next row on the same core"
        if n == 0
        else f"tasks of {n} rows interleave the threads: better balance when {s.rows} rows do not split evenly"
    ),
    ("softmax_cpu", "stream"): lambda o, n, p, s: (
        f"non-temporal stores write y without reading its lines first: {mib(4 * s.elements)} less read traffic"
        if n
        else "ordinary stores: y stays in cache for whoever reads it next"
    ),
    ("layernorm_cpu", "stats"): lambda o, n, p, s: (
        "statistics in one read of the row (block-wise means merged with Chan's formula)"
        if n == "welford"
        else "mean, then squared deviations: simpler loops, one more read of the row from cache"
    ),
    ("layernorm_cpu", "chunk"): lambda o, n, p, s: (
        f"chunks of {n}: {s.rows * -(-s.cols // n)} tasks; smaller balances better, larger merges less"
    ),
    ("matmul_cpu", "threads"): lambda o, n, p, s: (
        "row blocks over all cores (measured 1.6× on 2 cores at 512³)"
        if n == "all"
        else f"no fork/join or barriers, for a small product ({s.flops / 1e6:.0f} MFLOP)"
    ),
    ("matmul_cpu", "mr"): lambda o, n, p, s: _micro(p, s),
    ("matmul_cpu", "nv"): lambda o, n, p, s: _micro(p, s),
    ("matmul_cpu", "kc"): lambda o, n, p, s: (
        f"packed depth {n}: a {n}×{p['nv'] * p['vec']} B panel is {mib(4 * n * p['nv'] * p['vec'])} (L1 is 48 KiB)"
    ),
    ("matmul_cpu", "mc"): lambda o, n, p, s: (
        f"A blocks of {n}×{p['kc']} floats ({mib(4 * n * p['kc'])}) per thread, for L2"
    ),
    ("matmul_cpu", "nc"): lambda o, n, p, s: (
        f"B blocks of {p['kc']}×{n} floats ({mib(4 * n * p['kc'])}) shared by the threads, for L2/L3"
    ),
    ("*", "block"): lambda o, n, p, s: (
        f"{n} threads on {s.cols}-element rows ({s.cols / n:.0f} per thread): "
        + _more_or_less(o, n, "more loads in flight per row", "less idle time in the reductions, more blocks per SM")
    ),
    ("*", "vec4"): lambda o, n, p, s: (
        "128-bit loads and stores: a quarter of the memory instructions"
        if n
        else "scalar accesses: no alignment conditions, one more load per element"
    ),
    ("*", "fast_exp"): lambda o, n, p, s: (
        "__expf (ex2.approx) is several times cheaper than expf with ~2 ulp error here; matters once the row is cached"
        if n
        else "full-precision expf"
    ),
    ("softmax_cuda_block", "items"): lambda o, n, p, s: (
        "stream every row twice (online max/sum, then write): any row length"
        if n == 0
        else f"rows of up to {p['block'] * n} elements kept in registers: one read instead of two"
        + ("" if s.cols <= p["block"] * n else f" (not this problem's {s.cols}-element rows)")
    ),
    ("softmax_cuda_warp", "items"): lambda o, n, p, s: (
        "stream every row twice (online max/sum, then write): any row length"
        if n == 0
        else f"rows of up to {32 * n} elements kept in registers: one read instead of two"
        + ("" if s.cols <= 32 * n else f" (not this problem's {s.cols}-element rows)")
    ),
    ("softmax_cuda_warp", "rows_per_block"): lambda o, n, p, s: (
        f"{n} rows per block: {-(-s.rows // n)} blocks of {32 * n} threads"
    ),
    ("layernorm_cuda_block", "stats"): lambda o, n, p, s: (
        "Welford: the statistics in one read of the row"
        if n == "welford"
        else "two passes (sum, then squared deviations): no division per element, one more read of the row"
    ),
    ("layernorm_cuda_split", "split"): lambda o, n, p, s: (
        f"{n} blocks per row: {s.rows * n} blocks for {H200_SMS} SMs, chunks of {s.cols / n:.0f} elements"
    ),
    ("matmul_cuda_tiled", "bm"): lambda o, n, p, s: _tile_reason(p, s),
    ("matmul_cuda_tiled", "bn"): lambda o, n, p, s: _tile_reason(p, s),
    ("matmul_cuda_tiled", "tm"): lambda o, n, p, s: _tile_reason(p, s),
    ("matmul_cuda_tiled", "tn"): lambda o, n, p, s: _tile_reason(p, s),
    ("matmul_cuda_tiled", "bk"): lambda o, n, p, s: (
        f"K steps of {n}: "
        + _more_or_less(o, n, "fewer __syncthreads per FMA", "less shared memory, more blocks per SM")
        + f" ({4 * n * (p['bm'] + 4 + p['bn']) / 1024:.1f} KiB of shared memory)"
    ),
    ("matmul_cuda_simt", "bm"): lambda o, n, p, s: f"{n}x{p['bn']} tiles: {_tiles(p, s)} blocks on {H200_SMS} SMs",
    ("matmul_cuda_simt", "bn"): lambda o, n, p, s: f"{p['bm']}x{n} tiles: {_tiles(p, s)} blocks on {H200_SMS} SMs",
    ("matmul_cuda_simt", "bk"): lambda o, n, p, s: (
        f"K steps of {n}: "
        + _more_or_less(o, n, "fewer barriers per FMA", "less shared memory and fewer registers in flight")
    ),
    ("matmul_cuda_simt", "min_blocks"): lambda o, n, p, s: (
        f"{n} block(s) per SM, at most {min(255, 65536 // (templates_matmul_simt.threads(p) * n))} registers a "
        "thread: " + _more_or_less(o, n, "more warps to hide latency", "more registers for the micro-tile")
    ),
    ("matmul_cuda_simt", "order"): lambda o, n, p, s: (
        "odd rows of each thread's micro-tile take their columns backwards: consecutive FFMAs share an operand at "
        "every row's end and ptxas's registers for them collide in a bank less often (16% of the FFMAs against 27% "
        "on 8x8; 0.96× against 0.935× cuBLAS fp32 on 4096² on the H200 with two 8x8 blocks an SM, and 16x8 with the "
        "early first slice 2.85 ms against 2.93, but 3-10% slower on the one-block shapes without it: the registers "
        "are ptxas's choice, so measure)"
        if n == "serpentine"
        else "every row of the micro-tile in column order, as written"
    ),
    ("matmul_cuda_simt", "early"): lambda o, n, p, s: (
        "the next step's tile stored and the barrier passed before this step's last slice, so the next step's first "
        "fragments are read while that slice's FFMAs run, not right after the barrier (16x8 micro-tiles: 0.82× -> "
        "0.95× cuBLAS fp32 on 4096² on the H200; 8x8 with two blocks an SM: 4-14% slower, its registers then colliding "
        "in a bank more often)"
        if n
        else "the next step's first fragments read after the barrier, where the step begins"
    ),
}


CHANGES |= {
    ("matmul_cuda_bulk", name): CHANGES[("matmul_cuda_simt", name)] for name in ("bm", "bn", "min_blocks", "order")
}
CHANGES |= {
    ("matmul_cuda_bulk", "bk"): lambda o, n, p, s: (
        f"K steps of {n}: "
        + _more_or_less(o, n, "fewer copies and mbarrier waits per FMA", "less shared memory a stage")
        + " (BK 8, 16, 32: 3.02, 2.63, 2.57 ms for the GEMM alone on 4096² on an H100, B packed)"
    ),
    ("matmul_cuda_bulk", "stages"): lambda o, n, p, s: (
        f"{n} buffers: " + _more_or_less(o, n, "copies further ahead of the multiplies", "less shared memory a block")
    ),
    ("matmul_cuda_bulk", "lag"): lambda o, n, p, s: (
        f"a buffer refilled {n} step(s) after it was read: "
        + _more_or_less(o, n, "thread 0 seldom waits for a slower warp", "the copies start sooner")
    ),
    ("matmul_cuda_bulk", "b_tiles"): lambda o, n, p, s: (
        "B's tiles copied from B itself by a tensor map: no packing pass "
        f"({mib(4 * s.k * s.n * s.batch)} read and written saved), strided rows for the copy engine"
        if n == "tensor_map"
        else "B packed tile by tile first: one contiguous copy a step, one more pass over B"
    ),
}


# The wgmma GEMM's parameters, alike for a matmul and for a linear epilogue (figures: 4096² on the H200,
# bench/RESULTS.md).
for _name in ("matmul_cuda_wgmma", "epilogue_cuda_wgmma"):
    CHANGES |= {
        (_name, "bn"): lambda o, n, p, s: (
            f"128x{n} blocks: {s.batch * -(-s.m // 128) * -(-s.n // n)} blocks on {H200_SMS} SMs; "
            + _more_or_less(
                o,
                n,
                "one wgmma covers 256 columns, 128 accumulators a thread, two stages fit (4.01× cuBLAS fp32 against "
                "3.76× for 128x128 with two)",
                "half the accumulators and room for three stages",
            )
        ),
        (_name, "stages"): lambda o, n, p, s: (
            f"{n} shared-memory buffers: "
            + _more_or_less(o, n, "one more K step loading while the tensor cores multiply", "less shared memory")
        ),
        (_name, "fused"): lambda o, n, p, s: (
            "the GEMM splits its own fp32 tiles on their way to shared memory: no pass over the operands first (the "
            "passes took 65 of 686 µs on 4096², 99 of 1398 on gemm_bias_relu)"
            if n
            else "the split as a pass of its own before the GEMM, which then streams bf16 parts by cp.async"
        ),
    }
CHANGES |= {
    ("matmul_cuda_wgmma", "inflight"): lambda o, n, p, s: (
        "a K step's wgmma group left running through the barrier before the next refill (128x128, 3 stages: 3.95× "
        "against 3.70×; 128x256 with its two buffers: 3.32× against 4.01×)"
        if n
        else "each K step's group finished before the next refill: one barrier a step"
    ),
    ("matmul_cuda_wgmma", "group"): lambda o, n, p, s: (
        f"block rows in groups of {n}: blocks resident together share tiles of A and B in L2 (16 against 8 on "
        "4096²: 3% faster at 128x128, 0.6% slower at 128x256)"
    ),
}


def _micro(p: Params, s: Shape) -> str:
    regs = p["mr"] * p["nv"]
    return (
        f"a {p['mr']}×{p['nv'] * p['vec']} micro-tile: {regs} accumulator vectors, {regs / (p['mr'] + p['nv']):.1f} "
        "FMAs per load; more raise the compute density until the 32 vector registers spill"
    )


def _tile_reason(p: Params, s: Shape) -> str:
    threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return (
        f"{p['bm']}x{p['bn']} tiles with {p['tm']}x{p['tn']} per thread: {threads} threads, "
        f"{p['tm'] * p['tn'] / (p['tm'] + p['tn']):.1f} FMAs per shared-memory load, {_tiles(p, s)} blocks on "
        f"{H200_SMS} SMs"
    )


# Reductions over a dim and RMSNorm keep their reasons beside their templates.
BASE.update(catalog_reduce.BASE)
CHANGES.update(catalog_reduce.CHANGES)
# Fused pointwise chains and heavy op + pointwise tail, likewise.
BASE.update(catalog_elementwise.BASE)
CHANGES.update(catalog_elementwise.CHANGES)
