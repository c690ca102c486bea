"""The catalog entries for reductions over one dim and for RMSNorm: templates, descriptions, first-round seeds
and the planner's reasons (``BASE`` / ``CHANGES``, merged into ``agents.builtin.words``).

Imported at the end of ``agents.builtin.catalog`` (it builds on ``Param`` and ``Template`` from there); the
kernels are in ``templates_reduce_cuda``, ``templates_reduce_cpu``, ``templates_rmsnorm_cuda`` and
``templates_rmsnorm_cpu`` (their shared Python parts in ``templates_reduce_python``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agents.builtin import (
    templates_reduce_cpu,
    templates_reduce_cuda,
    templates_rmsnorm_cpu,
    templates_rmsnorm_cuda,
)
from agents.builtin.recognise_reduce import NORMS
from agents.builtin.shape import Shape
from agents.builtin.template import Param, Params, Template
from agents.builtin.templates_reduce_python import norm_of

H200_SMS = 132
_POW2 = (4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _strided(p: Params) -> bool | None:
    """Whether the problem's reduced dim is strided (inner > 1); None when the point carries no spec."""
    spec = p.get("spec")
    return json.loads(spec).get("strided") if spec else None


def _op(p: Params) -> str:
    return p.get("op") or "sum"


def _binding(p: Params) -> str:
    return "called through a tiny CPython extension" if p["binding"] == "cext" else "called through ctypes"


# ------------------------------------------------------------------------------------ descriptions


def _reduce_rows_text(p: Params) -> str:
    rows = p["block"] // p["tpr"]
    group = (
        f"{p['tpr']}-lane groups of a warp, {rows} rows per {p['block']}-thread block"
        if p["tpr"] < 32
        else f"{p['tpr'] // 32} warp(s) per row, {rows} row(s) per {p['block']}-thread block"
    )
    split = f", each row split over {p['split']} blocks merged by a second kernel" if p["split"] > 1 else ""
    vec = f"float4 loads ({p['unroll']} in flight per thread)" if p["vec4"] else "scalar loads"
    return f"{_op(p)} along contiguous rows: {group}{split}, {vec}, shuffle reductions"


def _reduce_inner_text(p: Params) -> str:
    down = f", {p['by']} threads down the reduced dim per column merged in shared memory" if p["by"] > 1 else ""
    split = f", the reduced dim split over {p['split']} blocks merged by a second kernel" if p["split"] > 1 else ""
    return (
        f"{_op(p)} down a strided dim: {p['bx']} threads across the inner dim "
        f"({'float4' if p['vec4'] else 'one float'} each, coalesced){down}{split}"
    )


def _reduce_cpu_text(p: Params) -> str:
    threads = {
        "out": "OpenMP over the outputs",
        "split": f"OpenMP over chunks of about {p['chunk']} reduced elements, partials merged in order",
        "none": "one thread",
    }[p["parallel"]]
    strided = _strided(p)
    cols = f"; strided dims in blocks of {p['cols_block']} columns" if strided is not False else ""
    return f"{_op(p)}: {threads}, {p['vec']}-wide SIMD with {p['unroll']} accumulators{cols}; {_binding(p)}"


def _norm(p: Params) -> str:
    """The normalisation's name (RMSNorm, L1 or L2 normalisation)."""
    return norm_of(p)[1]


def _statistic(op: str) -> str:
    return "sum of absolute values" if op.startswith("l1") else "sum of squares"


def _eager(s: Shape) -> str:
    """What eager PyTorch runs for this normalisation."""
    if s.op == "rms":
        return "eager RMSNorm runs 5-6 kernels (pow, mean, add, sqrt, div) with full-size temporaries"
    what = "the norm" if s.op == "l2" else "abs, then its sum" if s.op == "l1" else "abs, then its mean"
    return f"eager runs {what}, then a division: x is read twice and a temporary written"


def _rms_rows_text(p: Params) -> str:
    rows = p["block"] // p["tpr"]
    if p["split"] > 1:
        threads = f"each row split over {p['split']} blocks of {p['block']} threads (partial sums, then scaling)"
    else:
        threads = f"{p['tpr'] // 32} warp(s) per row, {rows} row(s) per block"
    cache = (
        f", rows of up to {4 * p['tpr'] * p['items']} elements held in registers (one read)"
        if p["items"] and p["split"] == 1
        else f", the row read twice ({_statistic(p.get('op') or 'rms')}, then scale)"
    )
    return f"{_norm(p)} over contiguous rows: {threads}{cache}, {'float4' if p['vec4'] else 'scalar'} accesses"


def _rms_inner_text(p: Params) -> str:
    cache = (
        f"up to {p['by'] * p['items']} values per column held in registers (one read)"
        if p["items"]
        else f"the column read twice ({_statistic(p.get('op') or 'rms')}, then scale)"
    )
    return (
        f"{_norm(p)} down a strided dim: {p['bx']} threads across the inner dim "
        f"({'float4' if p['vec4'] else 'one float'} each, coalesced), {p['by']} down the normalised dim, {cache}"
    )


def _rms_cpu_text(p: Params) -> str:
    threads = "OpenMP over rows / column blocks" if p["threads"] == "all" else "one thread"
    strided = _strided(p)
    cols = f"; strided dims in blocks of {p['cols_block']} columns" if strided is not False else ""
    return f"{_norm(p)}: {threads}, {p['vec']}-wide SIMD with {p['unroll']} accumulators{cols}; {_binding(p)}"


# ------------------------------------------------------------------------------------------- rules


def _reduce_rows_valid(p: Params) -> bool:
    return p["tpr"] <= p["block"]


def _reduce_inner_valid(p: Params) -> bool:
    return 32 <= p["bx"] * p["by"] <= 1024


def _rms_rows_valid(p: Params) -> bool:
    return p["tpr"] <= p["block"] and (p["split"] == 1 or (p["items"] == 0 and p["tpr"] == p["block"]))


def _rms_inner_valid(p: Params) -> bool:
    return 32 <= p["bx"] * p["by"] <= 1024 and p["items"] * (4 if p["vec4"] else 1) <= 64


def _reduce_cpu_irrelevant(p: Params) -> tuple[str, ...]:
    out: tuple[str, ...] = ("chunk",) if p["parallel"] != "split" else ()
    return (*out, "cols_block") if _strided(p) is False else out


def _rms_cpu_irrelevant(p: Params) -> tuple[str, ...]:
    return ("cols_block",) if _strided(p) is False else ()


_BIND = Param("binding", ("cext", "ctypes"), "cext", structural=True)
_REDUCE = ("op", "spec")
_RMS = ("eps", "op", "spec")


def _is_rms(s: Shape) -> bool:
    return s.family == "layernorm" and s.op in NORMS


TEMPLATES: tuple[Template, ...] = (
    Template(
        "reduce_cuda_rows",
        "reduce",
        "cuda",
        (
            Param("tpr", _POW2, 32, structural=True),
            Param("block", (128, 256, 512, 1024), 256),
            Param("vec4", (True, False), True),
            Param("unroll", (1, 2, 4), 2),
            Param("split", (1, 2, 4, 8, 16, 32, 64, 128), 1, structural=True),
        ),
        templates_reduce_cuda.render_reduce_rows,
        _reduce_rows_text,
        valid=_reduce_rows_valid,
        irrelevant=lambda p: ("unroll",) if not p["vec4"] else (),
        extras=_REDUCE,
        applies=lambda s: s.family == "reduce" and s.inner == 1,
    ),
    Template(
        "reduce_cuda_inner",
        "reduce",
        "cuda",
        (
            Param("bx", (16, 32, 64, 128, 256), 64),
            Param("by", (1, 2, 4, 8, 16, 32), 4, structural=True),
            Param("vec4", (True, False), True),
            Param("split", (1, 2, 4, 8, 16, 32, 64), 1, structural=True),
        ),
        templates_reduce_cuda.render_reduce_inner,
        _reduce_inner_text,
        valid=_reduce_inner_valid,
        extras=_REDUCE,
        applies=lambda s: s.family == "reduce" and s.inner > 1,
    ),
    Template(
        "reduce_cpu",
        "reduce",
        "cpu",
        (
            Param("parallel", ("out", "split", "none"), "out", structural=True),
            _BIND,
            Param("vec", (8, 16), 16),
            Param("unroll", (1, 2, 4), 2),
            Param("chunk", (1024, 4096, 16384, 65536), 16384),
            Param("cols_block", (256, 1024, 4096), 1024),
        ),
        templates_reduce_cpu.render_reduce_cpu,
        _reduce_cpu_text,
        irrelevant=_reduce_cpu_irrelevant,
        extras=_REDUCE,
        applies=lambda s: s.family == "reduce",
    ),
    Template(
        "rmsnorm_cuda_rows",
        "layernorm",
        "cuda",
        (
            Param("tpr", (32, 64, 128, 256, 512, 1024), 256, structural=True),
            Param("block", (128, 256, 512, 1024), 256),
            Param("vec4", (True, False), True),
            Param("items", (0, 2, 4, 8, 16), 0, structural=True),
            Param("split", (1, 2, 4, 8, 16, 32, 64), 1, structural=True),
        ),
        templates_rmsnorm_cuda.render_rms_rows,
        _rms_rows_text,
        valid=_rms_rows_valid,
        extras=_RMS,
        applies=lambda s: _is_rms(s) and s.inner == 1,
    ),
    Template(
        "rmsnorm_cuda_inner",
        "layernorm",
        "cuda",
        (
            Param("bx", (16, 32, 64, 128, 256), 64),
            Param("by", (1, 2, 4, 8, 16), 4, structural=True),
            Param("vec4", (True, False), True),
            Param("items", (0, 4, 8, 16, 32), 16, structural=True),
        ),
        templates_rmsnorm_cuda.render_rms_inner,
        _rms_inner_text,
        valid=_rms_inner_valid,
        extras=_RMS,
        applies=lambda s: _is_rms(s) and s.inner > 1,
    ),
    Template(
        "rmsnorm_cpu",
        "layernorm",
        "cpu",
        (
            Param("threads", ("all", "one"), "all", structural=True),
            _BIND,
            Param("vec", (8, 16), 16),
            Param("unroll", (1, 2, 4), 2),
            Param("cols_block", (256, 1024, 4096), 1024),
        ),
        templates_rmsnorm_cpu.render_rms_cpu,
        _rms_cpu_text,
        irrelevant=_rms_cpu_irrelevant,
        extras=_RMS,
        applies=_is_rms,
    ),
)


# ------------------------------------------------------------------------------ first-round seeds


def _pow2_at_least(n: float, values: tuple[int, ...]) -> int:
    return next((v for v in values if v >= n), values[-1])


def _pow2_at_most(n: float, values: tuple[int, ...]) -> int:
    return max([v for v in values if v <= n] or [values[0]])


def seeds(shape: Shape, device: str) -> list[tuple[str, Params]]:
    """A spread of first-round points for a reduction or an RMSNorm, the most promising first."""
    rms = _is_rms(shape)
    if shape.family != "reduce" and not rms:
        return []
    outer, red, inner = shape.rows, shape.cols, shape.inner
    if device == "cpu":
        return _cpu_seeds(shape, rms)
    if device != "cuda":
        return []
    if inner == 1:
        if rms:
            # ~16 floats per thread: short rows share a warp, long rows get several warps; the third seed tries
            # the neighbouring group size (twice as many threads, or half when already at 1024).
            tpr = _pow2_at_least(red / 16, _POW2)
            tpr = max(tpr, 32)
            other = 2 * tpr if tpr < 1024 else tpr // 2
            items = _pow2_at_least(red / (4 * tpr), (2, 4, 8, 16)) if red <= 4 * tpr * 16 else 0
            split = _split_for(outer, red, (1, 2, 4, 8, 16, 32, 64))
            out: list[tuple[str, Params]] = [
                ("rmsnorm_cuda_rows", {"tpr": tpr, "block": max(256, tpr), "items": items}),
                ("rmsnorm_cuda_rows", {"tpr": tpr, "block": max(256, tpr), "items": 0}),
                ("rmsnorm_cuda_rows", {"tpr": other, "block": max(256, other), "items": 0}),
                ("rmsnorm_cuda_rows", {"tpr": tpr, "block": max(256, tpr), "items": items, "vec4": False}),
            ]
            if split > 1:
                out.insert(0, ("rmsnorm_cuda_rows", {"tpr": 1024, "block": 1024, "items": 0, "split": split}))
            return out
        # ~64 floats per thread, 256-thread blocks, 4 float4 loads in flight: the best region of the H200 sweeps
        # in bench/RESULTS.md (`bench/host_device_split.py`), where a row's group of 512-1024 threads ran 1.2-2.5x
        # slower on the GPU (argmax / argmin too, since a thread's own elements need one compare each).
        tpr = min(256, _pow2_at_most(red / 64, _POW2))
        split = _split_for(outer, red, (1, 2, 4, 8, 16, 32, 64, 128))
        out = [
            ("reduce_cuda_rows", {"tpr": tpr, "block": 256, "unroll": 4}),
            ("reduce_cuda_rows", {"tpr": max(4, tpr // 2), "block": 256, "unroll": 4}),
            ("reduce_cuda_rows", {"tpr": tpr, "block": 1024, "unroll": 4}),
            ("reduce_cuda_rows", {"tpr": tpr, "block": 256, "unroll": 2}),
        ]
        if split > 1:
            out.insert(0, ("reduce_cuda_rows", {"tpr": 1024, "block": 1024, "split": split}))
        return out
    # Strided: enough threads across the inner dim to cover it with float4s, up to 8 down the reduced dim, and
    # the reduced dim split over blocks until ~1024 threads per SM of an H200 are busy (the sweep's best points
    # in bench/RESULTS.md); a split costs a second launch, so only as much as that needs.
    vec4 = inner % 4 == 0
    bx = _pow2_at_least(inner / (4 if vec4 else 1), (16, 32, 64, 128))
    if rms:
        by = _pow2_at_least(red / 16, (1, 2, 4, 8, 16)) if vec4 else _pow2_at_least(red / 32, (1, 2, 4, 8, 16))
        by = max(by, _pow2_at_least(32 / bx, (1, 2, 4, 8, 16)))
        items = _pow2_at_least(red / by, (4, 8, 16, 32))
        if items * (4 if vec4 else 1) > 64:
            items = 0
        return [
            ("rmsnorm_cuda_inner", {"bx": bx, "by": by, "items": items, "vec4": vec4}),
            ("rmsnorm_cuda_inner", {"bx": bx, "by": by, "items": 0, "vec4": vec4}),
            ("rmsnorm_cuda_inner", {"bx": max(32, bx // 2), "by": min(16, 2 * by), "items": 0, "vec4": vec4}),
        ]
    by = min(8, 1024 // bx)
    columns = inner / (4 if vec4 else 1)
    threads = outer * -(-columns // bx) * bx * by
    split = _pow2_at_most(min(1024 * H200_SMS / threads, red / (64 * by)), (1, 2, 4, 8, 16, 32, 64))
    out = [
        ("reduce_cuda_inner", {"bx": bx, "by": by, "split": split, "vec4": vec4}),
        ("reduce_cuda_inner", {"bx": bx, "by": by, "split": min(64, 2 * split), "vec4": vec4}),
        ("reduce_cuda_inner", {"bx": max(16, bx // 2), "by": min(16, 2 * by), "split": split, "vec4": vec4}),
        ("reduce_cuda_inner", {"bx": bx, "by": max(1, by // 2), "split": split, "vec4": vec4}),
    ]
    return out


def _split_for(rows: int, cols: int, values: tuple[int, ...]) -> int:
    """Blocks per row for few long rows: about 4 blocks per SM, chunks of at least 4096 elements."""
    if rows >= 2 * H200_SMS or cols < 16384:
        return 1
    return _pow2_at_most(min(4 * H200_SMS / max(rows, 1), cols / 4096), values)


def _cpu_seeds(shape: Shape, rms: bool) -> list[tuple[str, Params]]:
    tiny = shape.elements < 16384
    if rms:
        out: list[tuple[str, Params]] = [
            ("rmsnorm_cpu", {"threads": "all"}),
            ("rmsnorm_cpu", {"threads": "all", "unroll": 4}),
            ("rmsnorm_cpu", {"threads": "all", "vec": 8}),
            ("rmsnorm_cpu", {"threads": "one"}),
            ("rmsnorm_cpu", {"threads": "all", "cols_block": 256}),
            ("rmsnorm_cpu", {"threads": "all", "binding": "ctypes"}),
        ]
        return [out[3], *out[:3], *out[4:]] if tiny else out
    few_long = shape.rows * shape.inner < 8 and shape.cols >= 16384
    out = [
        ("reduce_cpu", {"parallel": "out"}),
        ("reduce_cpu", {"parallel": "split", "chunk": 16384}),
        ("reduce_cpu", {"parallel": "out", "unroll": 4}),
        ("reduce_cpu", {"parallel": "none"}),
        ("reduce_cpu", {"parallel": "out", "vec": 8}),
        ("reduce_cpu", {"parallel": "out", "binding": "ctypes"}),
    ]
    if few_long:
        return [out[1], out[0], *out[2:]]
    return [out[3], out[0], *out[1:3], *out[4:]] if tiny else out


# ------------------------------------------------------------------------------ planner's reasons


def _bytes(s: Shape) -> tuple[int, int]:
    """(bytes read, bytes written) at best."""
    n = 4 * s.rows * s.cols * s.inner
    if s.family == "reduce":
        return n, (8 if s.op.startswith("arg") else 4) * s.rows * s.inner
    return n, n


def facts(s: Shape) -> str:
    read, written = _bytes(s)
    layout = f"{s.rows}×{s.cols}" + (f"×{s.inner} (reduced dim strided by {s.inner})" if s.inner > 1 else "")
    return f"{layout}: {_mib(read)} read + {_mib(written)} written once at best"


BASE: dict[str, Callable[[Params, Shape], str]] = {
    "reduce_cuda_rows": lambda p, s: (
        f"memory-bound: the floor is one read of {_mib(4 * s.elements)}; "
        + (
            f"{s.rows} rows of {s.cols} fill only {min(s.rows, H200_SMS)} SMs with a block per row, so each row is "
            f"split over {p['split']} blocks"
            if p["split"] > 1
            else f"{p['tpr']} threads per {s.cols}-element row ({s.cols / p['tpr']:.0f} elements each) keep every "
            "lane busy and reduce with shuffles only"
        )
    ),
    "reduce_cuda_inner": lambda p, s: (
        f"the reduced elements are {4 * s.inner} bytes apart, so a thread per output column reads whole rows of "
        f"the inner dim together (coalesced); {s.rows * -(-s.inner // (4 * p['bx']))} column tiles"
        + (f" × {p['split']} splits of the reduced dim" if p["split"] > 1 else "")
        + f" keep the {H200_SMS} SMs busy"
    ),
    "reduce_cpu": lambda p, s: (
        "one fused C pass with vector accumulators and a ~1 µs call against eager's dispatch: "
        + (
            "the strided dim is read as contiguous runs of columns, accumulators in L1"
            if s.inner > 1
            else "each row streamed once"
        )
    ),
    "rmsnorm_cuda_rows": lambda p, s: (
        f"{_eager(s)}; one kernel reads x "
        + ("once (rows in registers)" if p["items"] and 4 * p["tpr"] * p["items"] >= s.cols else "twice (L2 helps)")
        + " and writes y once"
    ),
    "rmsnorm_cuda_inner": lambda p, s: (
        f"{_eager(s)}; here threads run across the "
        f"inner dim ({s.inner} columns, coalesced) and down the {s.cols} normalised values, "
        + ("held in registers: one read, one write" if p["items"] * p["by"] >= s.cols else "read twice")
    ),
    "rmsnorm_cpu": lambda p, s: (
        f"{_statistic(s.op)} and scaling fused in one C call ({_eager(s)}): "
        "expect 2-4× on memory-bound sizes, more on small ones where dispatch dominates"
    ),
}


def _more_or_less(old: Any, new: Any, more: str, less: str) -> str:
    return more if new > old else less


CHANGES: dict[tuple[str, str], Callable[[Any, Any, Params, Shape], str]] = {
    ("reduce_cuda_rows", "tpr"): lambda o, n, p, s: (
        f"{n} threads per row ({s.cols / n:.0f} elements each), {p['block'] // n} rows per block: "
        + _more_or_less(o, n, "more loads in flight per row", "less idle time in the reductions")
    ),
    ("rmsnorm_cuda_rows", "tpr"): lambda o, n, p, s: (
        f"{n} threads per row ({s.cols / n:.0f} elements each): "
        + _more_or_less(o, n, "more loads in flight per row", "more rows per block, cheaper reductions")
    ),
    ("reduce_cuda_rows", "block"): lambda o, n, p, s: f"{n}-thread blocks: {n // p['tpr']} row(s) per block",
    ("rmsnorm_cuda_rows", "block"): lambda o, n, p, s: f"{n}-thread blocks: {n // p['tpr']} row(s) per block",
    ("reduce_cuda_rows", "unroll"): lambda o, n, p, s: (
        f"{n} float4 loads in flight per thread (each into its own accumulator): "
        + _more_or_less(o, n, "more memory parallelism", "fewer registers")
    ),
    ("reduce_cuda_rows", "split"): lambda o, n, p, s: _split_text(n, s, "row"),
    ("reduce_cuda_inner", "split"): lambda o, n, p, s: _split_text(n, s, "column"),
    ("rmsnorm_cuda_rows", "split"): lambda o, n, p, s: _split_text(n, s, "row"),
    ("reduce_cuda_inner", "bx"): lambda o, n, p, s: (
        f"{n} threads across the inner dim: {4 * n * (4 if p['vec4'] else 1)} contiguous bytes per reduced row"
    ),
    ("rmsnorm_cuda_inner", "bx"): lambda o, n, p, s: (
        f"{n} threads across the inner dim: {4 * n * (4 if p['vec4'] else 1)} contiguous bytes per normalised row"
    ),
    ("reduce_cuda_inner", "by"): lambda o, n, p, s: (
        f"{n} thread(s) down the reduced dim per column ({s.cols / n:.0f} rows each): "
        + _more_or_less(o, n, "more loads in flight", "no shared-memory merge")
    ),
    ("rmsnorm_cuda_inner", "by"): lambda o, n, p, s: (
        f"{n} thread(s) down the normalised dim per column ({s.cols / n:.0f} values each)"
    ),
    ("rmsnorm_cuda_rows", "items"): lambda o, n, p, s: (
        "stream the row twice: any row length"
        if n == 0
        else f"rows of up to {4 * p['tpr'] * n} elements kept in registers: one read instead of two"
        + ("" if s.cols <= 4 * p["tpr"] * n else f" (not this problem's {s.cols}-element rows)")
    ),
    ("rmsnorm_cuda_inner", "items"): lambda o, n, p, s: (
        "read each column twice: any length"
        if n == 0
        else f"up to {n * p['by']} values per column kept in registers: one read instead of two"
        + ("" if s.cols <= n * p["by"] else f" (not this problem's {s.cols})")
    ),
    ("reduce_cpu", "parallel"): lambda o, n, p, s: {
        "out": f"{s.rows * s.inner} outputs over the cores",
        "split": f"the reduced dim cut into ~{p['chunk']}-element tasks: all cores busy even with "
        f"{s.rows * s.inner} outputs, partials merged in order",
        "none": f"no OpenMP fork/join (~2-5 µs): only a win on tiny inputs ({s.elements} elements here)",
    }[n],
    ("rmsnorm_cpu", "threads"): lambda o, n, p, s: (
        "rows (or column blocks) over all cores"
        if n == "all"
        else f"no OpenMP fork/join (~2-5 µs): only a win on tiny inputs ({s.elements} elements here)"
    ),
    ("reduce_cpu", "chunk"): lambda o, n, p, s: f"tasks of ~{n} reduced elements: smaller balances, larger merges less",
    ("reduce_cpu", "cols_block"): lambda o, n, p, s: _cols_block_text(n),
    ("rmsnorm_cpu", "cols_block"): lambda o, n, p, s: _cols_block_text(n),
}


def _split_text(n: int, s: Shape, what: str) -> str:
    if n == 1:
        return f"one block per {what}: no second kernel"
    return f"{n} blocks along each {what}'s reduced dim, a second small kernel merges their partials"


def _cols_block_text(n: int) -> str:
    return f"blocks of {n} columns: accumulators of {_mib(4 * n)} stay in L1 while each reduced row streams through"
