"""Why a candidate's time in the harness exceeds its time alone: the timing phase rebuilt one ingredient at a time.

    python bench/harness_gap.py PROBLEM [--point TEMPLATE:JSON ...] [--trials 200] [--repeats 2] [--sandbox]

For each point (the builtin team's first seed unless ``--point`` names some, as in ``host_device_split.py``)
the candidate is timed with the harness's own ``time_interleaved`` and ``CudaTimer``, first alone and then with
each ingredient of the real timing phase added in turn, once with the host's launch counted (``hold_ms=0``:
synchronise, L2 flushed, events around one call) and once hidden (the stream held while the host enqueues the
call, the harness's default since this script's findings):

1. ``alone``: the candidate only, the same input values every trial;
2. ``+ refresh``: fresh input values before every trial, written into the same buffers (the harness's refresher);
3. ``+ eager``: the eager reference interleaved, in a shuffled order each trial;
4. ``+ compile``: torch.compile's reference interleaved too (the harness's default contenders);
5. ``+ audit``: the worker's audit hook installed and on, as in the harness's timing phase.

``--waits MS`` adds a second ladder that asks what the interleaving does: the candidate timed (the harness's
call, plus the host's wall time of the call itself) right after, untimed, one of: nothing; the eager reference's
call; the host asleep for MS; the host spinning for MS; the GPU kept busy for MS by one spinning thread
(``torch.cuda._sleep``) while the host waits for it.

``--sandbox`` adds the whole thing: the point evaluated as an EvalJob in the local sandbox (a fresh worker
process, correctness checks first, the harness's default timing), its timing phase's median. The ladder runs
``--repeats`` times, its steps alternating, so a drift of the host's speed shows as a difference between
repeats, not between steps.
Prints a Markdown table of the candidate's median and p10/p90 per step and the eager median where timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agents.builtin.catalog import render  # noqa: E402
from bench.host_device_split import measure, on_the_gpu, points_for  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tools.problem import build_model, exec_source, make_inputs  # noqa: E402
from tools.protocol import EvalJob, TimingConfig  # noqa: E402
from tools.runtime_checks import AuditWatch  # noqa: E402
from tools.timing import CudaTimer, refresher, time_interleaved  # noqa: E402

STEPS = ("alone", "+ refresh", "+ eager", "+ compile", "+ audit")


def ladder(
    candidate: Callable[..., Any],
    eager: Callable[..., Any],
    compiled: Callable[..., Any],
    inputs: list[Any],
    refresh: Callable[[int], None],
    timer: CudaTimer,
    audit: AuditWatch,
    trials: int,
) -> dict[str, dict[str, float]]:
    cfg = TimingConfig(min_trials=trials, max_trials=trials, min_seconds=0, max_seconds=120)
    mode = "launch hidden" if timer.hold_ms else "launch counted"
    out: dict[str, dict[str, float]] = {}
    for i, step in enumerate(STEPS):
        contenders: dict[str, Callable[..., Any]] = {"candidate": candidate}
        if i >= 2:
            contenders["eager"] = eager
        if i >= 3:
            contenders["compile"] = compiled
        fresh = refresh if i >= 1 else (lambda k: None)
        if i >= 4:
            with audit.on():
                stats, *_ = time_interleaved(contenders, inputs, fresh, timer, cfg)
        else:
            stats, *_ = time_interleaved(contenders, inputs, fresh, timer, cfg)
        out[f"{step}, {mode}"] = {
            "median_us": stats["candidate"].median_ms * 1e3,
            "p10_us": stats["candidate"].p10_ms * 1e3,
            "p90_us": stats["candidate"].p90_ms * 1e3,
            "eager_us": stats["eager"].median_ms * 1e3 if "eager" in stats else float("nan"),
        }
    return out


def waits(
    candidate: Callable[..., Any],
    eager: Callable[..., Any],
    inputs: list[Any],
    timer: CudaTimer,
    trials: int,
    wait_ms: float,
) -> dict[str, dict[str, float]]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * wait_ms / start.elapsed_time(end))  # the spin's cycles per ms, measured

    def spin() -> None:
        end = time.perf_counter() + wait_ms / 1e3
        while time.perf_counter() < end:
            pass

    before: dict[str, Callable[[], Any] | None] = {
        "after nothing": None,
        "after eager's call": lambda: eager(*inputs),
        f"after the host slept {wait_ms:g} ms": lambda: time.sleep(wait_ms / 1e3),
        f"after the host spun {wait_ms:g} ms": spin,
        f"after the GPU spun {wait_ms:g} ms (one thread)": lambda: torch.cuda._sleep(cycles),
    }
    out = {}
    for step, between in before.items():
        m = measure(candidate, inputs, (timer, None), trials, burst=5, between=between)
        out[step] = {"median_us": m["call_us"], "host_us": m["synced_host_us"], "device_us": m["device_us"]}
    return out


def in_sandbox(sandbox: LocalSandbox, problem_path: str, template: str, params: dict[str, Any]) -> dict[str, float]:
    result = sandbox.run(
        EvalJob(
            problem_name=Path(problem_path).name,
            problem_source=Path(problem_path).read_text(),
            candidate_name=f"{template}.py",
            candidate_source=render(template, params, "cuda"),
            device="cuda",
            policy="relaxed",
        )
    )
    if result.status != "ok" or result.timing is None:
        raise RuntimeError(f"the sandbox's job ended {result.status}: {result.reason}")
    cand, eager = result.timing.stats["candidate"], result.timing.stats["eager"]
    return {
        "median_us": cand.median_ms * 1e3,
        "p10_us": cand.p10_ms * 1e3,
        "p90_us": cand.p90_ms * 1e3,
        "eager_us": eager.median_ms * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem")
    parser.add_argument("--point", action="append", default=[], help="TEMPLATE:JSON params (repeatable)")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--waits", type=float, default=0.0, help="also the waits ladder, waits of this many ms")
    parser.add_argument("--sandbox", action="store_true", help="also evaluate each point as an EvalJob")
    parser.add_argument("--json", help="also write every measurement here")
    args = parser.parse_args()

    device, problem, init, reference, inputs = on_the_gpu(args.problem)
    refresh = refresher(lambda k: make_inputs(problem.module.get_inputs, device, 1000 + k), inputs)
    timers = [CudaTimer(device, hold_ms=0), CudaTimer(device)]
    compiled = torch.compile(reference)
    audit = AuditWatch(candidate_file="<no candidate file>")
    with torch.no_grad():
        compiled(*inputs)
    sandbox = LocalSandbox() if args.sandbox else None
    print(f"{problem.info.name} on {torch.cuda.get_device_name(device)}, torch {torch.__version__}\n")
    print("| point | repeat | step | candidate median µs | p10 | p90 | eager median µs |")
    print("|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    try:
        for template, params in points_for(args.problem, args.point, []):
            module = exec_source(render(template, params, "cuda"), f"<{template}>", "candidate")
            candidate = build_model(module.ModelNew, init, device, seed=0)
            candidate.load_state_dict(reference.state_dict(), strict=False)
            shown = {k: v for k, v in params.items() if k not in ("spec", "op", "eps")}
            name = f"`{template}` {json.dumps(shown, separators=(',', ':'))}"
            for repeat in range(args.repeats):
                with torch.no_grad():
                    steps: dict[str, dict[str, float]] = {}
                    for timer in timers:
                        steps |= ladder(candidate, reference, compiled, inputs, refresh, timer, audit, args.trials)
                    if args.waits:
                        found = waits(candidate, reference, inputs, timers[0], args.trials, args.waits)
                        for step, m in found.items():
                            print(
                                f"| {name} | {repeat + 1} | {step} | {m['median_us']:.1f} | host {m['host_us']:.1f} | "
                                f"device {m['device_us']:.1f} | |",
                                flush=True,
                            )
                            rows.append({"point": name, "repeat": repeat, "step": step, **m})
                if sandbox is not None:
                    steps["sandbox (EvalJob)"] = in_sandbox(sandbox, args.problem, template, params)
                for step, m in steps.items():
                    rows.append({"point": name, "repeat": repeat, "step": step, **m})
                    print(
                        f"| {name} | {repeat + 1} | {step} | {m['median_us']:.1f} | {m['p10_us']:.1f} | "
                        f"{m['p90_us']:.1f} | {m['eager_us']:.1f} |",
                        flush=True,
                    )
    finally:
        if sandbox is not None:
            sandbox.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"problem": args.problem, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
