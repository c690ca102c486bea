"""The template catalog: every template's parameter space, and how to describe a point of it in words.

A template is one kernel strategy for one family on one device; its parameters are discrete, ordered
value lists. Parameters marked ``structural`` change the algorithm (threading, passes, binding, stats);
the others tune it (block size, vector width, unroll, tiles). The planner (``agents.builtin.search``)
moves structurally while a candidate is far from its roofline and tunes once it is close.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.builtin import templates_cpu, templates_cuda
from agents.builtin.recognise import Shape

Params = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """One searched parameter. Numeric values are kept sorted (neighbours are adjacent values); any other
    value set is categorical (every other value is a neighbour). ``default`` is the round-1 value."""

    name: str
    values: tuple[Any, ...]
    default: Any
    structural: bool = False

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in self.values)


@dataclass(frozen=True)
class Template:
    name: str
    family: str
    device: str
    params: tuple[Param, ...]
    renderer: Callable[[Params, str], str]
    describe: Callable[[Params], str]
    valid: Callable[[Params], bool] = lambda p: True
    # Parameters that do not matter for a point get their default, so equivalent points compare equal.
    irrelevant: Callable[[Params], tuple[str, ...]] = lambda p: ()
    extras: tuple[str, ...] = field(default=())  # problem facts carried in params (not searched), e.g. eps

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def defaults(self) -> Params:
        return {p.name: p.default for p in self.params}

    def normalise(self, params: Params) -> Params:
        """Defaults filled in, values checked, irrelevant parameters reset; raises ValueError if invalid."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known - set(self.extras))
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {unknown}")
        out = {**self.defaults(), **params}
        for p in self.params:
            if out[p.name] not in p.values:
                raise ValueError(f"{self.name}: {p.name}={out[p.name]!r} is not one of {list(p.values)}")
        for name in self.irrelevant(out):
            out[name] = self.param(name).default
        if not self.valid(out):
            raise ValueError(f"{self.name}: invalid combination {out}")
        return out

    def points(self) -> Iterator[Params]:
        """Every distinct valid point of the space, in a fixed order."""
        seen: set[str] = set()
        for values in itertools.product(*(p.values for p in self.params)):
            raw = dict(zip((p.name for p in self.params), values, strict=True))
            try:
                point = self.normalise(raw)
            except ValueError:
                continue
            k = key(self.name, point)
            if k not in seen:
                seen.add(k)
                yield point


def key(template: str, params: Params) -> str:
    return template + json.dumps(params, sort_keys=True, default=str)


# ------------------------------------------------------------------------------------- descriptions


def _binding(p: Params) -> str:
    return "called through a tiny CPython extension" if p["binding"] == "cext" else "called through ctypes"


def _softmax_cpu_text(p: Params) -> str:
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
        f"one {p['block']}-thread block per row, {rows}, {'float4' if p['vec4'] else 'scalar'} accesses, "
        f"{'__expf' if p['fast_exp'] else 'expf'}"
    )


def _softmax_warp_text(p: Params) -> str:
    rows = (
        f"rows of up to {32 * p['items']} elements held in registers (one read)"
        if p["items"]
        else "online max/sum pass then a normalising pass"
    )
    return (
        f"one warp per row ({p['rows_per_block']} rows per block, shuffle-only reductions), {rows}, "
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


# --------------------------------------------------------------------------------------- validity


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
            templates_cpu.render_softmax,
            _softmax_cpu_text,
            irrelevant=lambda p: (
                (("rows_per_task",) if not p["parallel"] else ())
                + (("stream",) if p["algorithm"] != "online_recompute" else ())
            ),
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
            templates_cpu.render_layernorm,
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
            templates_cpu.render_matmul,
            _matmul_cpu_text,
            valid=_matmul_cpu_valid,
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
            templates_cuda.render_softmax_block,
            _softmax_block_text,
            valid=lambda p: p["block"] * p["items"] <= 16384,
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
            templates_cuda.render_softmax_warp,
            _softmax_warp_text,
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
            templates_cuda.render_layernorm_block,
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
            templates_cuda.render_layernorm_split,
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
            templates_cuda.render_matmul,
            _matmul_cuda_text,
            valid=_matmul_cuda_valid,
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


# ------------------------------------------------------------------------------ first-round seeds


def _pick(values: tuple[int, ...], at_least: int) -> int:
    """The smallest value >= at_least, else the largest."""
    return next((v for v in sorted(values) if v >= at_least), max(values))


def seeds(shape: Shape, device: str) -> list[tuple[str, Params]]:
    """A spread of first-round points, the most promising first, for this shape."""
    f = shape.family
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
                block = 1024 if shape.cols > 4096 else 512
                items = _pick((4, 8, 16), -(-shape.cols // block))
                return [
                    ("softmax_cuda_block", {"block": block, "items": items}),
                    ("softmax_cuda_block", {"block": 512, "items": 0}),
                    ("softmax_cuda_block", {"block": block, "items": items, "fast_exp": True}),
                    ("softmax_cuda_warp", {"rows_per_block": 4, "items": 0}),
                ]
            return [
                ("softmax_cuda_block", {"block": 1024, "items": 0}),
                ("softmax_cuda_block", {"block": 512, "items": 0}),
                ("softmax_cuda_block", {"block": 1024, "items": 0, "fast_exp": True}),
                ("softmax_cuda_block", {"block": 256, "items": 0}),
            ]
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
                return [out[2], ("layernorm_cuda_split", {"block": 1024, "split": split}), *out[:2]]
            return out
        if f == "matmul":
            small = shape.m * shape.n < 512 * 512
            out = [
                ("matmul_cuda_tiled", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8}),
                ("matmul_cuda_tiled", {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4}),
                ("matmul_cuda_tiled", {"bm": 128, "bn": 64, "bk": 16, "tm": 8, "tn": 4}),
                ("matmul_cuda_tiled", {"bm": 64, "bn": 128, "bk": 16, "tm": 4, "tn": 8}),
            ]
            return [out[1], out[2], out[0], out[3]] if small else out
    return []
