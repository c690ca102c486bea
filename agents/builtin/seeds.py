"""First-round seeds: for a recognised shape, a spread of catalog points, the most promising first.

Later rounds move from the best of these (``search.py``). The order and the points come from the H200
measurements in bench/RESULTS.md; reductions, RMSNorm and pointwise chains keep their seeds beside their
templates (``catalog_reduce.seeds``, ``catalog_elementwise.seeds``), which ``seeds`` hands them to.
"""

from __future__ import annotations

from agents.builtin import catalog_elementwise, catalog_reduce
from agents.builtin.catalog import H200_SMS, TEMPLATES
from agents.builtin.recognise_reduce import NORMS
from agents.builtin.shape import Shape
from agents.builtin.template import Params


def _pick(values: tuple[int, ...], at_least: int) -> int:
    """The smallest value >= at_least, else the largest."""
    return next((v for v in sorted(values) if v >= at_least), max(values))


def seeds(shape: Shape, device: str) -> list[tuple[str, Params]]:
    """A spread of first-round points, the most promising first, for this shape."""
    f = shape.family
    if f == "reduce" or (f == "layernorm" and shape.op in NORMS):
        return catalog_reduce.seeds(shape, device)
    if f in ("elementwise", "epilogue"):
        return catalog_elementwise.seeds(shape, device)
    if device == "cpu":
        if f == "softmax":
            tiny = shape.elements < 16384
            out = [
                ("softmax_cpu", {"algorithm": "three_pass", "prefetch": 1}),
                ("softmax_cpu", {"algorithm": "online_store", "prefetch": 1}),
                ("softmax_cpu", {"algorithm": "three_pass", "vec": 8, "prefetch": 2}),
                ("softmax_cpu", {"algorithm": "online_recompute", "stream": True, "prefetch": 0}),
                ("softmax_cpu", {"algorithm": "three_pass", "binding": "ctypes"}),
                ("softmax_cpu", {"algorithm": "three_pass", "parallel": False}),
            ]
            return out[-1:] + out[:-1] if tiny else out
        if f == "layernorm":
            few_long_rows = shape.rows < 8 and shape.cols >= 16384
            out = [
                ("layernorm_cpu", {"parallel": "rows", "stats": "welford"}),
                ("layernorm_cpu", {"parallel": "split", "stats": "welford", "chunk": 16384}),
                ("layernorm_cpu", {"parallel": "rows", "stats": "two_pass", "unroll": 4}),
                ("layernorm_cpu", {"parallel": "none", "stats": "welford"}),
                ("layernorm_cpu", {"parallel": "rows", "stats": "welford", "binding": "ctypes"}),
                ("layernorm_cpu", {"parallel": "split", "stats": "two_pass", "chunk": 4096}),
            ]
            return [out[1], out[0], *out[2:]] if few_long_rows else out
        if f == "matmul":
            return [
                ("matmul_cpu", {"mr": 6, "nv": 2, "mc": 192}),
                ("matmul_cpu", {"mr": 8, "nv": 2, "mc": 96}),
                ("matmul_cpu", {"mr": 4, "nv": 3, "kc": 128}),
                ("matmul_cpu", {"mr": 6, "nv": 2, "threads": "one"}),
                ("matmul_cpu", {"vec": 8, "mr": 6, "nv": 2}),
            ]
    if device == "cuda":
        if f == "softmax":
            if shape.cols <= 1024:
                items = _pick((4, 8, 16, 32), -(-shape.cols // 32))
                return [
                    ("softmax_cuda_warp", {"rows_per_block": 4, "items": items}),
                    ("softmax_cuda_warp", {"rows_per_block": 8, "items": 0}),
                    ("softmax_cuda_block", {"block": 128, "items": _pick((4, 8, 16, 32), -(-shape.cols // 128))}),
                    ("softmax_cuda_warp", {"rows_per_block": 4, "items": items, "fast_exp": True}),
                ]
            if shape.cols <= 16384:
                # The row held in registers, up to 32 elements a thread, by the smallest block that holds it: many
                # small blocks an SM hide each other's block-wide reductions (bench/RESULTS.md: 4096 columns at
                # 128 x 32 ran at 95% of the copy floor, at 512 x 8 at 65%; 8192 at 256 x 32, 97%).
                block = _pick((128, 256, 512), -(-shape.cols // 32))
                items = _pick((4, 8, 16, 32), -(-shape.cols // block))
                return [
                    ("softmax_cuda_block", {"block": block, "items": items}),
                    ("softmax_cuda_block", {"block": 2 * block, "items": max(4, items // 2)}),
                    ("softmax_cuda_block", {"block": block, "items": items, "fast_exp": True}),
                    ("softmax_cuda_block", {"block": 512, "items": 0}),
                ]
            out = [
                ("softmax_cuda_block", {"block": 1024, "items": 0}),
                ("softmax_cuda_block", {"block": 512, "items": 0}),
                ("softmax_cuda_block", {"block": 1024, "items": 0, "fast_exp": True}),
                ("softmax_cuda_block", {"block": 256, "items": 0}),
            ]
            return _cluster_softmax_seeds(shape.cols) + out
        if f == "layernorm":
            few_long_rows = shape.rows < 264 and shape.cols >= 65536
            # ~4 blocks per SM of an H200 (132 SMs), but chunks of at least ~2048 elements.
            split = min(_pick((4, 8, 16, 32, 64, 128), -(-528 // max(shape.rows, 1))), max(4, shape.cols // 2048))
            split = max(v for v in (4, 8, 16, 32, 64, 128) if v <= split)
            out = [
                ("layernorm_cuda_block", {"block": 1024, "stats": "welford"}),
                ("layernorm_cuda_block", {"block": 512, "stats": "two_pass"}),
                ("layernorm_cuda_split", {"block": 512, "split": split}),
                ("layernorm_cuda_block", {"block": 256, "stats": "welford"}),
            ]
            if few_long_rows:
                persistent = _persistent_layernorm_seeds(shape)
                return [
                    *persistent[:1],
                    *_wide_layernorm_seeds(shape),
                    *persistent[1:],
                    out[2],
                    ("layernorm_cuda_split", {"block": 1024, "split": split}),
                    *out[:2],
                ]
            return out
        if f == "matmul":
            small = shape.m * shape.n < 512 * 512
            out = [
                ("matmul_cuda_tiled", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8}),
                ("matmul_cuda_tiled", {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4}),
                ("matmul_cuda_tiled", {"bm": 128, "bn": 64, "bk": 16, "tm": 8, "tn": 4}),
                ("matmul_cuda_tiled", {"bm": 64, "bn": 128, "bk": 16, "tm": 4, "tn": 8}),
            ]
            if small:
                return [out[1], out[2], out[0], out[3]]
            if shape.m % 128 == 0 and shape.n % 128 == 0 and shape.k % 8 == 0:
                # The pipelined SIMT kernel first: it is what the strict policy (no tensor cores) can run. 8x8
                # micro-tiles, two blocks an SM, serpentine order, measured fastest on 4096² (bench/RESULTS.md);
                # then cuBLAS's micro-tile (16x8), which needs the next step's first slice read early.
                out = [
                    (
                        "matmul_cuda_simt",
                        {"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2, "order": "serpentine"},
                    ),
                    (
                        "matmul_cuda_simt",
                        {
                            "bm": 128,
                            "bn": 128,
                            "tm": 16,
                            "tn": 8,
                            "min_blocks": 1,
                            "order": "serpentine",
                            "early": True,
                        },
                    ),
                    ("matmul_cuda_simt", {"bm": 128, "bn": 256, "tm": 8, "tn": 16, "min_blocks": 1}),
                    *out,
                ]
                if shape.k % 32 == 0:
                    # Before them, the same FFMA loop fed by the bulk-copy engine: 1.01x cuBLAS fp32 on 4096² on an
                    # H100 where the SIMT seed ran 0.95x (bench/RESULTS.md, 2026-12-06); BK 32, three buffers, B's
                    # tiles through a tensor map, A transposed by one pass.
                    out = [("matmul_cuda_bulk", {}), *out]
            if shape.m % 128 == 0 and shape.n % 128 == 0 and shape.k % 32 == 0:
                # Tensor cores, relaxed policy only (the planner drops these under strict). bf16x3 first: 2.3-2.4x eager
                # on 4096² on the H200 against 3xTF32's 1.0x, at ~1/5 of the tolerance (bench/RESULTS.md); 64x64
                # warp tiles fastest; the promoted 64x32 point keeps half the error where K is long.
                mma = [
                    ("matmul_cuda_bf16x3", {"warp": "64x64", "promote": False}),
                    ("matmul_cuda_bf16x3", {"warp": "64x64", "promote": False, "bn": 256, "stages": 2}),
                    ("matmul_cuda_bf16x3", {"warp": "64x32", "bk": 64, "promote": True}),
                    ("matmul_cuda_mma", {"split": 3, "warp": "64x32", "promote": True}),
                    ("matmul_cuda_mma", {"split": 1, "warp": "64x64"}),
                ]
                if shape.k % 64 == 0:
                    # wgmma before them: 3.7-4.0x eager on 4096² where mma.sync's bf16x3 ran 2.38x in the same run;
                    # 128x256 blocks with 2 stages fastest (4.01x), then 128x128 with a K step's group left in
                    # flight (3.95x) (bench/RESULTS.md). The first needs N % 256 == 0. The split fused into the GEMM
                    # is no seed: on bmm_64x1024x512x1024 on an H100 it took 804 us held against 537 for the first
                    # seed with its two split passes (bench/RESULTS.md, 2026-12-06).
                    wgmma = [
                        ("matmul_cuda_wgmma", {"bn": 256, "stages": 2}),
                        ("matmul_cuda_wgmma", {"inflight": True}),
                    ]
                    mma = [*wgmma, *mma]
                return [*mma, *out]
            return out
    return []


def _persistent_layernorm_seeds(shape: Shape) -> list[tuple[str, Params]]:
    """``layernorm_cuda_persistent`` where a row is long enough (>= 1 Mi elements) for its grid-wide wait to be
    small beside reading it, and fits the grid (132 SMs): blocks of 512 threads with the fewest float4 a thread
    that hold a row's chunk, half of them staged, as the H200 sweep chose (bench/RESULTS.md); then 1024 threads
    with half the float4. Where three chunks of x fit a block's shared memory (rows up to ~2 Mi elements), x
    held in three buffers comes first: 190 us held against 218 for the staged point on (32, 1024, 2048) on the
    H200 (bench/RESULTS.md, 2026-12-06), and the staged point goes last."""
    if shape.cols % 4 or shape.rows > 64 or shape.cols < 1 << 20:
        return []
    fitting = [v for v in (4, 8, 16) if H200_SMS * 512 * v * 4 >= shape.cols]
    if not fitting:
        return []
    items = fitting[0]
    name = "layernorm_cuda_persistent"
    staged = (name, {"block": 512, "per_sm": 1, "items": items, "unroll": 4, "stage": items // 2})
    big_blocks = (name, {"block": 1024, "per_sm": 1, "items": max(4, items // 2), "unroll": 2, "stage": 2})
    held = (name, {"block": 512, "per_sm": 1, "items": items, "unroll": 2, "hold": 3})
    template = TEMPLATES[name]
    if template.valid({**template.defaults(), **held[1]}):  # three chunks fit the shared memory
        return [held, big_blocks, staged]
    return [staged, big_blocks]


def _wide_layernorm_seeds(shape: Shape) -> list[tuple[str, Params]]:
    """``layernorm_cuda_wide`` for few long rows, after the H200 sweep (bench/RESULTS.md): ~512 statistics
    blocks, two float4 loads in flight, up to 16 rows per normalising block while ~4 blocks of 512 threads per
    SM remain (132 SMs); then 1024-thread blocks with one float4 in flight, twice the split, 8 rows."""
    if shape.cols % 4:
        return []
    out = []
    for block, unroll, stats_blocks, most_rows in ((512, 2, 512, 16), (1024, 1, 1024, 8)):
        step = 4 * block * unroll
        at_most = max(8, min(stats_blocks // max(shape.rows, 1), shape.cols // step))
        split = max(v for v in (8, 16, 32, 64, 128, 256) if v <= at_most)
        tiles = -(-shape.cols // step)
        fill = [v for v in (16, 8, 4, 2, 1) if v <= most_rows and tiles * -(-shape.rows // v) >= 4 * H200_SMS]
        params = {"block": block, "split": split, "unroll": unroll, "rows_per_block": fill[0] if fill else 1}
        out.append(("layernorm_cuda_wide", params))
    return out


def _cluster_softmax_seeds(cols: int) -> list[tuple[str, Params]]:
    """Cluster points whose capacity holds a row of ``cols`` with the least padding; the H200 favoured
    8 blocks of 128 threads x 16 float4 on 65536-element rows (bench/RESULTS.md)."""
    if cols % 4 or cols < 4096:
        return []
    preferred = [(8, 128, 16), (4, 256, 16), (8, 64, 32), (8, 256, 8), (4, 512, 8), (2, 512, 16), (8, 512, 8)]
    fitting = [(c, b, i) for c, b, i in preferred if c * b * i * 4 >= cols]
    fitting.sort(key=lambda p: p[0] * p[1] * p[2])  # least padding first, preference order among equals
    return [
        ("softmax_cuda_cluster", {"cluster": c, "block": b, "items": i, "stream": stream})
        for (c, b, i), stream in zip(fitting[:3], (False, False, True), strict=False)
    ]


__all__ = ["seeds"]
