"""Where a candidate's time goes: the host's part and the GPU's, beside the eager reference, for template points.

    python bench/host_device_split.py PROBLEM [--point TEMPLATE:JSON ...] [--sweep NAME=V1,V2 ...]
                                      [--calls 200] [--burst 50] [--json FILE] [--audit] [--after-eager] [--compile]
                                      [--kernels N] [--cudnn-benchmark]

The harness synchronises before each timed call, so a call's time is its host work up to the launch plus the
GPU's. For the eager reference and every point this prints a Markdown row of medians:

- call: the harness's measure with the host's launch counted (``tools.timing.CudaTimer(hold_ms=0)``:
  synchronise, L2 flushed, events around one call; the harness's only measure before the launch was hidden);
- device: events around a burst of back-to-back calls, divided by the burst, so that the host's work hides
  behind the GPU's (L2 flushed before each burst only: close to the kernels' time when the inputs are much
  larger than L2, and a lower bound otherwise);
- host: the wall time of the same burst per call, the time Python and the launches take to enqueue;
- host after sync: the wall time of the call itself inside the harness's measure (right after a
  synchronisation, as every timed call runs).
- held: the harness's measure now (``CudaTimer(hold_ms=1.0)``: L2 flushed, the stream held while the host
  enqueues the call, events around its GPU work); ``--flush write`` flushes as the harness did before
  (``zero_`` of a buffer twice the L2, which leaves it full of dirty lines for the timed call to write back).

``--kernels N`` profiles five more calls of each contender (torch's profiler, ``bench/kernel_times.py``) and lists,
after the table, its N costliest kernels with their device time a call: where a library op's time goes (casts,
the library's kernel, the tail). ``--cudnn-benchmark`` turns ``torch.backends.cudnn.benchmark`` on for every
contender, the references included: cuDNN then times its algorithms on a shape's first call and keeps the fastest,
where by default (off) its heuristics pick one. The harness never turns it on.

``--after-eager`` calls the reference, untimed, before each timed call of a point (the harness's trials
interleave the contenders, so another one's work always comes between two calls of one). ``--compile`` adds a row
for ``torch.compile(reference)``, the harness's other reference.

Points are the builtin team's first-round seeds for the problem unless ``--point`` names some (params as
JSON, merged over the seed of that template, which carries the problem's spec). ``--sweep tpr=32,64
unroll=2,4`` times every combination over each point. Each point's output is checked against the reference
(the harness's own comparison, relaxed policy) before it is timed; a point that is wrong or fails is
listed, not timed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agents.builtin.catalog import TEMPLATES, render  # noqa: E402
from agents.builtin.recognise import analyse  # noqa: E402
from agents.builtin.seeds import seeds  # noqa: E402
from bench.kernel_times import kernel_lines, kernel_times  # noqa: E402
from bench.kernel_variants import COPY_BYTES_PER_S  # noqa: E402
from tools.correctness import compare, flatten_outputs  # noqa: E402
from tools.problem import Problem, build_model, exec_source, load_problem, make_inputs  # noqa: E402
from tools.runtime_checks import AuditWatch  # noqa: E402
from tools.timing import CudaTimer  # noqa: E402

Point = tuple[str, dict[str, Any]]


def points_for(problem_path: str, named: list[str], sweep: list[str]) -> list[Point]:
    problem = load_problem(problem_path)
    shape = analyse(problem.info)
    if shape is None:
        raise SystemExit(f"{problem_path}: no builtin template applies")
    # The problem's facts (the op, its dims, eps) ride along in every point, as the builtin planner sends them.
    first = [(t, {**shape.extras(), **p}) for t, p in seeds(shape, "cuda")]
    base: list[Point] = first[:1] if sweep else first  # a sweep varies the most promising seed
    if named:
        base = []
        for text in named:
            template, _, params = text.partition(":")
            seed = next((p for t, p in first if t == template), {})
            base.append((template, {**shape.extras(), **seed, **json.loads(params or "{}")}))
    grid = [(name, [json.loads(v) for v in values.split(",")]) for name, _, values in (s.partition("=") for s in sweep)]
    out: list[Point] = []
    for template, params in base:
        for combo in itertools.product(*(values for _, values in grid)):
            point = (template, {**params, **dict(zip((n for n, _ in grid), combo, strict=True))})
            if point not in out:
                out.append(point)
    return out


def measure(
    fn: Callable[..., Any],
    inputs: list[Any],
    timers: tuple[CudaTimer, CudaTimer | None],
    calls: int,
    burst: int,
    between: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """Medians of the measures above; ``timers``: the synced one (launch counted), then the held one (None: no
    held measure, ``held_us`` is NaN)."""
    timer, held = timers
    for _ in range(10):
        fn(*inputs)
    call_us, synced_host_us = [], []

    def host_timed(*args: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args)
        synced_host_us.append((time.perf_counter() - t0) * 1e6)
        return out

    for _ in range(calls):
        if between is not None:
            between()
        timer.flush()
        call_us.append(timer.time_call(host_timed, inputs).ms * 1000)
    held_us = []
    for _ in range(calls if held is not None else 0):
        if between is not None:
            between()
        held.flush()
        held_us.append(held.time_call(fn, inputs).ms * 1000)
    device_us, host_us = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        timer.flush()
        timer.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(burst):
            fn(*inputs)
        host_us.append((time.perf_counter() - t0) * 1e6 / burst)
        end.record()
        timer.synchronize()
        device_us.append(start.elapsed_time(end) * 1000 / burst)
    return {
        "call_us": statistics.median(call_us),
        "held_us": statistics.median(held_us) if held_us else math.nan,
        "device_us": statistics.median(device_us),
        "host_us": statistics.median(host_us),
        "synced_host_us": statistics.median(synced_host_us),
    }


def on_the_gpu(problem_path: str) -> tuple[torch.device, Problem, list[Any], torch.nn.Module, list[Any]]:
    """The problem loaded, its reference built (seed 0) and one input set made (seed 1) on the current GPU."""
    device = torch.device("cuda", torch.cuda.current_device())
    problem = load_problem(problem_path)
    init = list(problem.module.get_init_inputs())
    reference = build_model(problem.module.Model, init, device, seed=0)
    return device, problem, init, reference, make_inputs(problem.module.get_inputs, device, seed=1)


def after_eager(reference: Callable[..., Any], inputs: list[Any], warm_host_us: float) -> None:
    reference(*inputs)
    if warm_host_us:
        torch.cuda.synchronize()
        end = time.perf_counter() + warm_host_us / 1e6
        while time.perf_counter() < end:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem")
    parser.add_argument("--point", action="append", default=[], help="TEMPLATE:JSON params (repeatable)")
    parser.add_argument("--sweep", nargs="*", default=[], help="NAME=V1,V2 (values as JSON)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument(
        "--audit", action="store_true", help="time with the worker's audit hook installed and on, as the harness does"
    )
    parser.add_argument(
        "--warm-host-us",
        type=float,
        default=0.0,
        help="with --after-eager: wait for the reference's call, then keep the host busy this long before the "
        "timed call (does a long wait for the GPU leave the host slow?)",
    )
    parser.add_argument(
        "--after-eager",
        action="store_true",
        help="call the eager reference (untimed) before each timed call of a point, as the harness's interleaved "
        "trials put other contenders between two calls of one",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile's reference (compiled and warmed up first, as the harness does), a row after "
        "eager's",
    )
    parser.add_argument(
        "--flush",
        choices=("read", "write"),
        default="read",
        help="how the L2 is flushed before each timed call (tools.timing.CudaTimer): read a buffer twice its size "
        "(the harness's default), or write one (the harness before)",
    )
    parser.add_argument(
        "--kernels",
        type=int,
        default=0,
        metavar="N",
        help="after the table, each contender's N costliest kernels and their device time a call (0: none)",
    )
    parser.add_argument(
        "--cudnn-benchmark",
        action="store_true",
        help="torch.backends.cudnn.benchmark on for every contender (cuDNN times its algorithms and keeps the fastest)",
    )
    args = parser.parse_args()
    if args.kernels < 0:
        parser.error(f"--kernels must be 0 or more, got {args.kernels}")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark

    device, problem, init, reference, inputs = on_the_gpu(args.problem)
    with torch.no_grad():
        expected = [t.clone() for t in flatten_outputs(reference(*inputs))]
    floor_us = problem.info.bytes_moved / COPY_BYTES_PER_S * 1e6
    timers = (CudaTimer(device, hold_ms=0, flush=args.flush), CudaTimer(device, hold_ms=1.0, flush=args.flush))
    print(
        f"{problem.info.name} on {torch.cuda.get_device_name(device)}, torch {torch.__version__}; "
        f"copy floor {floor_us:.1f} µs ({problem.info.bytes_moved / 2**20:.0f} MiB moved); "
        f"L2 flushed by a {args.flush}; cuDNN benchmark {'on' if args.cudnn_benchmark else 'off'}\n"
    )
    columns = ("call µs", "device µs", "host µs", "host after sync µs", "call − device", "vs eager (call)")
    columns += ("% floor (call)", "% floor (device)", "held µs", "% floor (held)")
    print(f"| contender | {' | '.join(columns)} |\n|---|{'---|' * len(columns)}")
    rows: list[dict[str, Any]] = []
    profiles: list[tuple[str, list[str]]] = []

    def report(name: str, m: dict[str, float], eager_us: float, fn: Callable[..., Any]) -> None:
        row: dict[str, Any] = {"contender": name, **m}
        if args.kernels:
            times = kernel_times(fn, inputs, device)
            row["kernels"] = [vars(k) for k in times]
            profiles.append((name, kernel_lines(times, args.kernels)))
        rows.append(row)
        print(
            f"| {name} | {m['call_us']:.1f} | {m['device_us']:.1f} | {m['host_us']:.1f} | {m['synced_host_us']:.1f} | "
            f"{m['call_us'] - m['device_us']:.1f} | {eager_us / m['call_us']:.3f}× | "
            f"{100 * floor_us / m['call_us']:.1f}% | {100 * floor_us / m['device_us']:.1f}% | "
            f"{m['held_us']:.1f} | {100 * floor_us / m['held_us']:.1f}% |",
            flush=True,
        )

    audit: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.audit:
        audit = AuditWatch(candidate_file="<no candidate file>").on()
        print("(timed with the worker's audit hook installed and on)\n")
    with torch.no_grad(), audit:
        eager = measure(reference, inputs, timers, args.calls, args.burst)
        report("eager", eager, eager["call_us"], reference)
        if args.compile:
            compiled = torch.compile(reference)
            compiled(*inputs)  # compiles now, outside the timed calls
            timed = measure(compiled, inputs, timers, args.calls, args.burst)
            report("torch.compile", timed, eager["call_us"], compiled)
        shape_facts = ("spec", "op", "eps")
        for template, params in points_for(args.problem, args.point, args.sweep):
            shown = {k: v for k, v in params.items() if k not in shape_facts}
            name = f"`{template}` {json.dumps(shown, separators=(',', ':'))}"
            try:
                TEMPLATES[template].normalise(dict(params))
            except ValueError as exc:
                print(f"| {name} | not a point of the template: {exc} | | | | | | | | | |")
                continue
            try:
                module = exec_source(render(template, params, "cuda"), f"<{template}>", "candidate")
                candidate = build_model(module.ModelNew, init, device, seed=0)
                candidate.load_state_dict(reference.state_dict(), strict=False)
                check = compare(candidate(*inputs), expected, None, "relaxed", seed=1)
                if not check.passed:
                    print(f"| {name} | wrong output: {check.reason} | | | | | | | | | |")
                    continue
                between = (lambda: after_eager(reference, inputs, args.warm_host_us)) if args.after_eager else None
                timed = measure(candidate, inputs, timers, args.calls, args.burst, between)
                report(name, timed, eager["call_us"], candidate)
            except Exception as exc:  # one failing point is a row of the table, not the end of the sweep
                print(f"| {name} | failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]} | | | | | | | | | |")
    for name, lines in profiles:
        print(f"\nKernels of {name} (torch's profiler, device time a call):\n" + "\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"problem": args.problem, "floor_us": floor_us, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
