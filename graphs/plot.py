"""The report's speedup plot as inline SVG, drawn here so the report needs no script library or network.

Every candidate is a point at its round (speedup vs the faster reference); the fastest of each round
is joined by a line, and the run's result so far (the best accepted candidate, or the reference's 1×)
by a dashed step. The y axis turns logarithmic once the ratios span a decade, where a linear axis
would flatten everything but the outlier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from graphs.rundata import RoundSummary

WIDTH, HEIGHT = 780, 400
LEFT, RIGHT, TOP, BOTTOM = 84, 170, 18, 74
FAILED_BAND = 16  # a strip under the axis for candidates that never got a time
Scale = Callable[[float], float]
COLOURS: dict[str | None, str] = {"accepted": "#1a7f37", "rejected": "#cf222e", None: "#8250df"}


@dataclass(frozen=True)
class Point:
    cid: str
    round: int
    speedup: float | None  # None: not timed (failed before the profiler)
    verdict: str | None
    status: str
    best: bool


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    log: bool

    def frac(self, v: float) -> float:
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log:
            out = []
            for e in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi)) + 1):
                out += [m * 10.0**e for m in (1, 2, 5) if self.lo <= m * 10.0**e <= self.hi]
            return out
        step = _nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step) * step
        return [round(first + i * step, 10) for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _nice_step(raw: float) -> float:
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def y_axis(values: list[float]) -> Axis:
    """Bounds that hold every value and the reference's 1×; logarithmic when they span 10× or more."""
    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    if hi / lo >= 10:
        return Axis(lo / 1.25, hi * 1.25, log=True)
    pad = max((hi - lo) * 0.12, 0.05)
    return Axis(max(lo - pad, 0.0), hi + pad, log=False)


def timed(p: Point) -> bool:
    return p.speedup is not None and p.speedup > 0 and math.isfinite(p.speedup)


def _label(v: float) -> str:
    return f"{v:g}×" if v >= 0.01 else f"{v:.0e}×"


def speedup_svg(points: list[Point], rounds: list[RoundSummary]) -> str:
    n = max(len(rounds), 1, *(p.round for p in points))
    axis = y_axis([p.speedup for p in points if p.speedup is not None and timed(p)])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    band_y = TOP + plot_h + 2

    def x_of(round_: float) -> float:
        return LEFT + plot_w * (round_ - 0.5) / n

    def y_of(v: float) -> float:
        return TOP + plot_h * (1 - axis.frac(v))

    xs = _columns(points, x_of)
    one = y_of(1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="speedup-plot" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="speedup per candidate and per round">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot-bg"/>',
        *(  # every other round shaded, so that each column reads as one round
            f'<rect x="{x_of(r - 0.5):.1f}" y="{TOP}" width="{plot_w / n:.1f}" height="{plot_h}" class="alt"/>'
            for r in range(2, n + 1, 2)
        ),
        f'<rect x="{LEFT}" y="{band_y}" width="{plot_w}" height="{FAILED_BAND}" class="failed-band"/>',
        f'<text x="{LEFT - 6}" y="{band_y + 12}" class="note" text-anchor="end">not timed</text>',
    ]
    for t in axis.ticks():
        y = y_of(t)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_label(t)}</text>')
    parts += [
        f'<text x="{x_of(r):.1f}" y="{band_y + FAILED_BAND + 16}" class="tick" text-anchor="middle">{r}</text>'
        for r in range(1, n + 1)
    ]
    parts += [
        f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{one:.1f}" y2="{one:.1f}" class="ref-line"/>',
        f'<text x="{LEFT + plot_w - 4}" y="{one - 5:.1f}" class="note" text-anchor="end">reference 1×</text>',
        *_round_lines(rounds, xs, x_of, y_of),
        *_points(points, xs, y_of, band_y + FAILED_BAND / 2),
        f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" class="axis"/>',
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" class="axis"/>',
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 12}" class="axis-label" text-anchor="middle">round</text>',
        f'<text transform="translate(20 {TOP + plot_h / 2}) rotate(-90)" class="axis-label" text-anchor="middle">'
        "speedup vs faster reference</text>",
        f'<text x="{LEFT + plot_w}" y="{HEIGHT - 12}" class="note" text-anchor="end">'
        f"y: {'log' if axis.log else 'linear'} scale</text>",
        *_legend(LEFT + plot_w + 14, TOP + 10),
        "</svg>",
    ]
    return "\n".join(parts)


def _columns(points: list[Point], x_of: Scale) -> dict[str, float]:
    """Each candidate's x: spread across its round's column so that equal speedups stay apart."""
    by_round: dict[int, list[Point]] = {}
    for p in points:
        by_round.setdefault(p.round, []).append(p)
    out = {}
    for r, group in by_round.items():
        for i, p in enumerate(group):
            out[p.cid] = x_of(r if len(group) == 1 else r - 0.25 + 0.5 * i / (len(group) - 1))
    return out


def _points(points: list[Point], xs: dict[str, float], y_of: Scale, failed_y: float) -> list[str]:
    out = []
    for p in points:
        x, colour = xs[p.cid], COLOURS.get(p.verdict, COLOURS[None])
        if p.speedup is None or not timed(p):
            title = f"{p.cid}: {p.status}, not timed ({p.verdict or 'unjudged'})"
            out.append(
                f'<g class="pt failed" data-cid="{escape(p.cid)}"><title>{escape(title)}</title>'
                f'<path d="M{x - 4:.1f},{failed_y - 4:.1f}l8,8m0,-8l-8,8" stroke="{colour}" stroke-width="2.5"/></g>'
            )
            continue
        title = f"{p.cid}: {p.speedup:.3f}× ({p.status}/{p.verdict or 'unjudged'})" + (" — best" if p.best else "")
        ring = ' stroke="#111" stroke-width="2.5"' if p.best else ' stroke="#fff" stroke-width="1"'
        out.append(
            f'<circle class="pt" data-cid="{escape(p.cid)}" cx="{x:.1f}" cy="{y_of(p.speedup):.1f}" '
            f'r="{7 if p.best else 5}" fill="{colour}"{ring}><title>{escape(title)}</title></circle>'
        )
    return out


def _round_lines(rounds: list[RoundSummary], xs: dict[str, float], x_of: Scale, y_of: Scale) -> list[str]:
    fastest = [
        f"{xs[r.fastest_id]:.1f},{y_of(r.fastest_speedup):.1f}"
        for r in rounds
        if r.fastest_id in xs and r.fastest_speedup is not None and r.fastest_speedup > 0
    ]
    steps = []  # flat across each round, a jump where the result improved
    for r in rounds:
        steps += [
            f"{x_of(r.round - 0.5):.1f},{y_of(r.result_so_far):.1f}",
            f"{x_of(r.round + 0.5):.1f},{y_of(r.result_so_far):.1f}",
        ]
    out = [f'<polyline points="{" ".join(steps)}" class="best-so-far"/>'] if steps else []
    if fastest:
        out.append(f'<polyline points="{" ".join(fastest)}" class="round-best"/>')
    return out


def _legend(x: float, y: float) -> list[str]:
    rows = [
        ('<circle cx="7" cy="0" r="5" fill="#1a7f37"/>', "accepted"),
        ('<circle cx="7" cy="0" r="5" fill="#cf222e"/>', "rejected"),
        ('<path d="M3,-4l8,8m0,-8l-8,8" stroke="#cf222e" stroke-width="2.5"/>', "failed, not timed"),
        ('<circle cx="7" cy="0" r="6" fill="#fff" stroke="#111" stroke-width="2.5"/>', "best candidate"),
        ('<line x1="0" x2="14" y1="0" y2="0" class="round-best"/>', "fastest of each round"),
        ('<line x1="0" x2="14" y1="0" y2="0" class="best-so-far"/>', "result so far"),
        ('<line x1="0" x2="14" y1="0" y2="0" class="ref-line"/>', "reference (1×)"),
    ]
    return [
        f'<g transform="translate({x:.0f} {y + 20 * i:.0f})">{mark}<text x="20" y="4" class="note">{text}</text></g>'
        for i, (mark, text) in enumerate(rows)
    ]
