"""The ``kforge`` command.

Exit codes (``kforge eval``; the other commands use 0, 2 and 3 alike, ``kforge profile`` 1 for a failed profile,
``kforge batch`` 1 when every problem failed, and any command 141 when the reader of its output went away):
  0  the candidate is correct on every check (and timed)
  1  the candidate was rejected: compile_error, runtime_error, incorrect, rejected (a dynamic
     anti-cheat finding), timeout, crashed, or a static anti-cheat finding
  2  bad input: a problem or candidate file that cannot be used, or a bad option
  3  the environment cannot do what was asked: no GPU, no compiler, the sandbox failed
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.cli_options import add_sandbox_options, resolve_problem, sandbox_config
from graphs.cli_profile import add_parser as add_profile_parser
from graphs.logs import configure_logging
from tools import keys
from tools.errors import ConfigError, KernelforgeError

PROVIDER_KEYS = ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
EXIT_OK, EXIT_REJECTED = 0, 1
DEMO_PROBLEM = {"cuda": "softmax_4096x65536", "cpu": "softmax_small"}
VERBOSE_HELP = "log progress and show tracebacks"


# ----------------------------------------------------------------------------------------- output


def _bytes(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _fmt(x: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def render(evaluation) -> str:
    from graphs.rundata import precision_text
    from tools.speed import describe as describe_speed

    r = evaluation.result
    lines = [
        f"{evaluation.problem} · {evaluation.candidate or 'reference only'} · {evaluation.device} · "
        f"policy {evaluation.policy}"
    ]
    lines.append(f"  verdict      {r.status}: {r.reason}")
    for finding in evaluation.anti_cheat:
        lines.append(f"  REJECTED     anti-cheat: {finding}")
    if evaluation.reduced_precision:
        lines.append(f"  PRECISION    {precision_text(evaluation.reduced_precision)}")
    for warning in evaluation.warnings:
        lines.append(f"  WARNING      {warning}")
    if r.compile:
        total = sum(c.seconds for c in r.compile)
        cached = sum(c.cached for c in r.compile)
        lines.append(f"  compile      {len(r.compile)} kernel source(s) through NVRTC, {total:.3f} s ({cached} cached)")
    if r.correctness:
        c = r.correctness
        ok = sum(k.passed for k in c.checks)
        lines.append(
            f"  correctness  {ok}/{len(c.checks)} checks passed (atol={c.atol:g} rtol={c.rtol:g}) · max abs err "
            f"{_fmt(c.worst('max_abs_error'))} · vs float64 {_fmt(c.worst('max_abs_error_vs_fp64'))} "
            f"(reference {_fmt(c.worst('reference_abs_error_vs_fp64'))})"
        )
    if r.timing:
        t = r.timing
        host = t.method == "cuda_events"  # on the CPU the host's time is the time: no mode, no host column
        mode = ""
        if host:
            mode = ", launch hidden (GPU work of each call)" if t.launch_hidden else ", host launch counted"
        lines.append(
            f"  timing       {t.method}{mode}, interleaved, fresh input values for each of {t.input_sets} trials, "
            f"{t.flush_bytes >> 20} MiB flushed before each call"
        )
        lines.append(
            f"    {'':10} {'median ms':>10} {'p10':>9} {'p90':>9} {'spread':>7} {'trials':>7} {'% roofline':>10}"
            + (f" {'host ms':>9}" if host else "")
        )
        for name, s in t.stats.items():
            pct = evaluation.percent_of_roofline(name)
            lines.append(
                f"    {name:10} {s.median_ms:10.4f} {s.p10_ms:9.4f} {s.p90_ms:9.4f} {100 * s.spread:6.1f}% "
                f"{s.trials:7d} "
                f"{_fmt(pct, '.1f', '%'):>10}" + (f" {_fmt(s.host_median_ms, '.4f'):>9}" if host else "")
            )
        sp = evaluation.speedups()
        if sp:
            lines.append(
                f"  speedup      vs eager {_fmt(sp['vs_eager'], '.3f', '×')} · "
                f"vs compile {_fmt(sp['vs_compile'], '.3f', '×')}"
                f" · vs best {describe_speed(sp['vs_best'], *evaluation.speed_vs_best())}"
                f" (best reference: {t.best_reference})"
            )
    if evaluation.floor:
        f = evaluation.floor
        lines.append(
            f"  roofline     floor {f.floor_ms:.4f} ms, {f.bound}-bound (bytes {f.bytes_ms:.4f} ms, "
            f"flops {f.flops_ms:.4f} ms at {f.rate_name})"
        )
    if r.memory:
        m = r.memory
        where = "resident" if m.method == "rss" else "allocated"
        lines.append(
            f"  memory       peak {_bytes(m.peak_bytes)} {where} ({_fmt(m.ratio, '.2f', '×')} one eager forward's "
            f"{_bytes(m.eager_peak_bytes)}; plan {_bytes(m.plan_bytes)}) · answers {_bytes(m.answers_on_device_bytes)} "
            f"on the device, {_bytes(m.answers_parked_bytes)} parked"
        )
    if r.phases:
        phases = " · ".join(f"{k} {v:.2f}s" for k, v in r.phases.items())
        lines.append(f"  phases       {phases} · job {r.wall_s:.2f}s")
    if r.status not in ("ok", "incorrect") and (r.details or r.stderr_tail):
        lines.append(
            "  details      " + (r.details or r.stderr_tail).strip().replace("\n", "\n               ")[-3000:]
        )
    return "\n".join(lines)


if TYPE_CHECKING:
    from graphs.config import RunConfig
    from tools.protocol import TimingConfig

# ---------------------------------------------------------------------------------------- commands


def cmd_sandbox(args: argparse.Namespace) -> int:
    """`kforge sandbox build|clean`: make the bare sandbox image; remove leftover sandbox containers."""
    from sandbox.docker import DockerSandbox, build_bare_image

    client = DockerSandbox.connect()
    if args.action == "build":
        tag = build_bare_image(client, args.tag)
        print(f"built {tag}: an empty image; jobs run the host's Python through read-only mounts")
    else:
        removed = 0
        for container in client.containers.list(all=True, filters={"label": "kernelforge=sandbox"}):
            container.remove(force=True)
            removed += 1
        print(f"removed {removed} sandbox container(s)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from sandbox.backends import job_machine, make_sandbox
    from sandbox.devices import WAIT_NOTICE_S
    from sandbox.evaluation import evaluate, read_candidate
    from tools.problem import load_problem

    sandbox = sandbox_config(args)
    device, available_bytes = job_machine(sandbox, args.device)
    problem = load_problem(resolve_problem(args.problem))
    source = read_candidate(args.candidate)
    references = tuple(r for r in ("eager", "compile") if not (r == "compile" and args.no_compile))
    evaluation = evaluate(
        problem,
        source,
        sandbox=make_sandbox(sandbox),
        device=device,  # type: ignore[arg-type]
        available_bytes=available_bytes,
        candidate_name=str(args.candidate),
        policy=args.policy,
        references=references,
        n_checks=args.checks,
        seed=args.seed,
        timing=timing_config(args),
        timeout_s=args.timeout,
        notice_after_s=WAIT_NOTICE_S,  # one job is all eval waits for: said from the first seconds
    )
    if args.json:
        print(evaluation.model_dump_json(indent=2))
    else:
        print(render(evaluation))
    return EXIT_OK if evaluation.accepted else EXIT_REJECTED


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the default built-in problem: the builtin team, three rounds, then the trace."""
    from tools.device import resolve_device

    device = resolve_device(args.device)
    problem = DEMO_PROBLEM[device]
    print(f"kforge demo: `kforge run {problem} --device {device} --rounds 3`, builtin offline team\n", flush=True)
    run_args = build_parser().parse_args(["run", problem, "--device", device, "--rounds", "3", "--ideas", "3"])
    run_args.model, run_args.verbose = "builtin", args.verbose
    return cmd_run(run_args)


def _progress(saved: dict[str, Any] | None = None) -> Any:
    """A live line per step: round, candidates evaluated, best speedup so far; a resumed run's counted on from its
    ``saved`` state."""
    seen: dict[str, Any] = {"round": 0, "evaluated": 0, "best": None}

    def count(node: str, update: dict[str, Any]) -> None:
        seen["round"] = update.get("round", seen["round"])
        seen["evaluated"] += sum(1 for c in update.get("candidates", []) if node == "coder")
        for c in update.get("candidates", []):
            sp = c.get("speedup_vs_best")
            if sp is not None and (seen["best"] is None or sp > seen["best"]):
                seen["best"] = sp

    count("coder", saved or {})

    def show(node: str, update: dict[str, Any]) -> None:
        if node.startswith("__"):  # LangGraph's own entries (a resumed thread's metadata), not a step of the run
            return
        count(node, update)
        best = "—" if seen["best"] is None else f"{seen['best']:.3f}×"
        extra = f" · stop: {update['stop_reason']}" if update.get("stop_reason") else ""
        print(f"[round {seen['round']}] {node:9} · {seen['evaluated']} candidates · best {best}{extra}", flush=True)

    return show


def _finish(paths: Any, state: dict[str, Any]) -> int:
    from graphs.report import write_report
    from graphs.rundata import load_paths
    from graphs.trace import tree_lines

    run = load_paths(paths)
    print("\n".join(tree_lines(run)))
    report = write_report(run)
    print(f"\nrun {paths.run_id}: {state.get('stop_reason')}; best/, report.md and {report.name} in {paths.dir}")
    print(trace_hint(paths.dir))
    return EXIT_OK


def trace_hint(run_dir: Path) -> str:
    """The commands that show how a run got there, with ``--runs-dir`` where they would not look by default."""
    from graphs.runs import runs_root

    where = "" if run_dir.parent.resolve() == runs_root().resolve() else f" --runs-dir {run_dir.parent}"
    return f"how it got there: kforge trace {run_dir.name}{where} · kforge report {run_dir.name}{where} --open"


def run_config(args: argparse.Namespace, **fields: Any) -> RunConfig:
    """The ``RunConfig`` of `kforge run` and `kforge batch` from the options they share, plus ``fields`` (the problem
    and the budgets); a value out of range is a one-line ``ConfigError`` naming its option."""
    from pydantic import ValidationError

    from graphs.config import RunConfig
    from sandbox.backends import job_machine

    sandbox = sandbox_config(args)
    try:
        return RunConfig(
            device=job_machine(sandbox, args.device)[0],  # type: ignore[arg-type]
            policy=args.policy,
            model=args.model,
            base_url=args.base_url,
            **llm_settings(args),
            rounds=args.rounds,
            ideas=args.ideas,
            repair_attempts=args.repairs,
            patience=args.patience,
            sandbox=sandbox,
            compile_reference=not args.no_compile,
            n_checks=args.checks,
            timing=timing_config(args),
            ncu=args.ncu,
            **fields,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where, why = "-".join(map(str, first["loc"])), first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"--{where}: {why}" if where else why) from exc


def cmd_run(args: argparse.Namespace) -> int:
    from graphs.config import Budgets
    from graphs.launch import stream_run
    from graphs.runs import create_run, runs_root
    from tools.problem import load_problem

    problem = load_problem(resolve_problem(args.problem))
    config = run_config(
        args,
        problem=str(problem.path),
        budgets=Budgets(wall_s=args.max_wall, tokens=args.max_tokens, dollars=args.max_dollars, gpu_s=args.max_gpu_s),
    )
    if args.roles:
        config.roles = args.roles.split(",")
    from agents import registry

    known = registry.available()
    unknown = [r for r in config.roles if r not in known]
    if unknown:
        raise ConfigError(f"--roles: unknown role(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    paths = create_run(config, problem, runs_root(args.runs_dir))
    configure_logging(args.verbose, paths.events)
    print(f"run {paths.run_id} in {paths.dir}", flush=True)
    return _finish(paths, stream_run(config, paths, resume=False, on_update=_progress()))


def say(text: str) -> None:
    """A batch's progress line. A module function, not ``partial(print)``: the settings that carry it are
    pickled to each problem's process, and a Ray driver may have replaced ``builtins.print``
    (``ray.experimental.tqdm_ray``), which then no longer pickles."""
    print(text, flush=True)


def cmd_batch(args: argparse.Namespace) -> int:
    """`kforge batch`: one agent graph per problem of a folder or glob, `--parallel` at once; one table."""
    import shlex

    from graphs.batch import BatchSettings, discover, merge, run_batch
    from graphs.config import Budgets
    from graphs.runs import runs_root

    runs_dir = runs_root(args.runs_dir)
    out = Path(args.out) if args.out else runs_dir
    if args.merge:
        if args.after:
            raise ConfigError("--after is for a batch that runs problems; --merge takes every file as it is")
        record = merge([Path(f) for f in args.problems], out, "batch")
        print(f"batch: merged {len(record['rows'])} rows into {out / 'batch.md'}")
        return EXIT_OK
    if args.parallel < 1:
        raise ConfigError("--parallel: must be at least 1")
    base = run_config(
        args,
        problem="",  # each problem's own path replaces it
        budgets=Budgets(wall_s=args.max_wall, tokens=args.max_tokens, dollars=args.max_dollars),
    )
    problems = discover(args.problems, [o for o in args.only.split(",") if o])
    if not problems:
        raise ConfigError("no problem left after --only")
    settings = BatchSettings(
        runs_dir=runs_dir,
        out=out,
        command=shlex.join(["kforge", *sys.argv[1:]]),
        parallel=args.parallel,
        budget_s=args.budget_s,
        fresh_check=args.fresh_check,
        verbose=args.verbose,
        say=say,
        options={k: v for k, v in vars(args).items() if k != "func"},
        after=tuple(Path(f) for f in args.after),
    )
    print(f"batch: {len(problems)} problem(s), {args.parallel} at a time, runs in {runs_dir}", flush=True)
    try:
        record = run_batch(problems, base, settings)
    except KeyboardInterrupt:
        print(f"batch: interrupted; {out / 'batch.md'} says where each problem got to. The same command resumes.")
        return 130
    s = record["summary"]
    if s["pending"]:
        print(
            f"batch: --budget-s {args.budget_s:g} spent; {s['pending']} problem(s) left: run the same command again"
            f" (on a machine without {runs_dir}: with --after {out / 'batch.json'})"
        )
    fast = s["fast_p_vs_eager"]
    print(
        f"batch: {s['done']} of {s['problems']} done, {s['failed']} failed · "
        f"correct {_fmt(s['correctness_rate'], '.0%')} · fast_1 {_fmt(fast['1'], '.0%')} · "
        f"geomean vs faster ref {_fmt(s['geomean_vs_best'], '.3f', '×')} · "
        f"{s['tokens']} tokens, ${s['dollars']:.2f} · {out / 'batch.md'}",
        flush=True,
    )
    return EXIT_REJECTED if s["problems"] and s["failed"] == s["problems"] else EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    from graphs.launch import stream_run
    from graphs.runs import load_state, open_run, runs_root

    paths, config, _ = open_run(args.run, runs_root(args.runs_dir))
    configure_logging(args.verbose, paths.events)
    print(f"resuming {paths.run_id}", flush=True)
    return _finish(paths, stream_run(config, paths, resume=True, on_update=_progress(load_state(paths))))


def cmd_trace(args: argparse.Namespace) -> int:
    from graphs.rundata import load_run
    from graphs.runs import runs_root
    from graphs.trace import candidate_detail, role_lines, summary_lines, tree_lines

    run = load_run(args.run, runs_root(args.runs_dir))
    if args.json:
        print(json.dumps({"run": run.meta, "state": run.state}, indent=1, default=str))
    elif args.candidate:
        if run.candidate(args.candidate) is None:
            known = ", ".join(c.id for c in run.candidates) or "none yet"
            raise ConfigError(
                f"--candidate {args.candidate}: no such candidate in run {run.run_id} (candidates: {known})"
            )
        print("\n".join(candidate_detail(run, args.candidate)))
    elif args.role:
        print("\n".join(role_lines(run, role=args.role)))
    else:
        print("\n".join([*summary_lines(run), "", *tree_lines(run), "", *role_lines(run)]))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    import webbrowser

    from graphs.report import write_report
    from graphs.rundata import load_run
    from graphs.runs import runs_root

    run = load_run(args.run, runs_root(args.runs_dir))
    path = write_report(run, Path(args.output) if args.output else None).resolve()
    print(f"wrote {path}")
    if args.open and not webbrowser.open(path.as_uri()):
        print(f"no browser found here: open {path.as_uri()} on a machine with one (the file is self-contained)")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from graphs.runs import list_runs, runs_root

    rows = list_runs(runs_root(args.runs_dir))
    if not rows:
        print(f"no runs in {runs_root(args.runs_dir)}")
    for r in rows:
        sp = "—" if r["speedup"] is None else f"{r['speedup']:.3f}×"
        print(
            f"{r['run_id']:45} {r['problem']:24} {r['model']:16} {r['device']:4} rounds {r['rounds']} "
            f"· {r['candidates']} candidates · best {r['best'] or 'reference'} {sp} · {r['stop']}"
        )
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    import platform

    import torch

    from tools.compile import c_compiler, nvrtc_version
    from tools.device import gpu_summary

    def line(name: str, value: str) -> None:
        print(f"{name:12} {value}")

    line("python", f"{platform.python_version()} ({sys.executable})")
    line("torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'no'})")
    gpus = gpu_summary()
    line("gpu", "; ".join(gpus) if gpus else "none visible (the CPU target still works)")
    for name, probe in (("nvrtc", nvrtc_version), ("c compiler", c_compiler)):
        try:
            line(name, probe())
        except KernelforgeError as exc:
            line(name, f"MISSING: {exc}")
    nvcc = shutil.which("nvcc")
    line(
        "nvcc",
        subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
        if nvcc
        else "not found",
    )
    try:
        import cupy

        line("cupy", cupy.__version__)
    except ImportError:
        line("cupy", "not installed (needed to run CUDA candidates: pip install 'kernelforge[gpu]')")
    line("ncu", _ncu_status())
    line("containment", _containment_status())
    line("docker", _docker_status())
    # The keys were taken out of the environment when kforge started: ask the store that holds them.
    held = keys.held()
    found = [k for k in PROVIDER_KEYS if k in held or os.environ.get(k)]
    line("llm keys", ", ".join(found) if found else "none set (the builtin offline team will be used)")
    return EXIT_OK


def _ncu_status() -> str:
    from tools import ncu

    try:
        path = ncu.find_ncu()
    except ncu.NcuError:
        return "not found (`kforge profile` and `kforge run --ncu` need Nsight Compute)"
    return f"{ncu.version(path)} ({path})"


def _containment_status() -> str:
    from sandbox import contain

    got = contain.probe()
    namespaces = f"local CPU jobs get their own {contain.NAMESPACES} namespaces"
    if got == f"{contain.NAMESPACES},{contain.LOCKED}":
        locked = contain.LOCKED.replace(",", ", ")
        return f"{namespaces}; a candidate's job also {locked}, within pids and memory limits"
    if got.startswith(contain.NAMESPACES):
        return f"{namespaces}; a candidate's job: {got.split('; ', 1)[-1]}"
    return f"{got}: local jobs run without their own PID, network, IPC and mount namespaces"


def _docker_status() -> str:
    if not shutil.which("docker"):
        return "client not installed"
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=5)
        version = client.version().get("Version", "?")
    except DockerException as exc:
        return f"client installed, engine not reachable ({str(exc).splitlines()[0][:80]})"
    return f"engine {version} reachable"


# --------------------------------------------------------------------------------------------- main


def add_checking_options(parser: argparse.ArgumentParser) -> None:
    """How much each verification checks and times: the same for eval, run and batch."""
    parser.add_argument("--checks", type=int, default=5, help="seeded input sets each check compares on (default 5)")
    parser.add_argument("--trials", type=int, default=100, help="minimum timed calls per contender (default 100)")
    parser.add_argument("--min-seconds", type=float, default=0.5, help="minimum timing duration, s (default 0.5)")


def timing_config(args: argparse.Namespace) -> TimingConfig:
    """The timing options of ``add_checking_options`` and ``add_timing_mode``."""
    from tools.protocol import TimingConfig

    return TimingConfig(min_trials=args.trials, min_seconds=args.min_seconds, hide_launch=not args.count_launch)


def add_timing_mode(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--count-launch",
        action="store_true",
        help="CUDA: time each call right after a synchronisation, the host's launch work counted (the latency "
        "of one isolated call); default: each call's GPU work, the launch hidden behind a held stream",
    )


def add_llm_options(parser: argparse.ArgumentParser) -> None:
    """How the model is asked and billed: the same for run and batch."""
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the model's)")
    parser.add_argument(
        "--max-tokens-per-call", type=int, default=None, help="cap on each answer's tokens (default: the model's)"
    )
    parser.add_argument("--llm-timeout", type=float, default=120.0, help="limit of one model call, s (default 120)")
    parser.add_argument(
        "--price-in",
        type=float,
        default=None,
        help="dollars per million input tokens (default: the list price; 0 "
        "for a model behind --base-url); with --price-out",
    )
    parser.add_argument("--price-out", type=float, default=None, help="dollars per million output tokens")
    parser.add_argument(
        "--implementations",
        type=int,
        default=1,
        help="coders that each write their own implementation of every idea (default 1)",
    )
    parser.add_argument(
        "--seed-builtin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="an LLM team's rounds also get the builtin catalog's ideas where a template applies, so the run is "
        "never worse than the builtin team alone (default: on)",
    )


def llm_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RunConfig`` fields of ``add_llm_options``."""
    if (args.price_in is None) != (args.price_out is None):
        raise ConfigError("--price-in and --price-out go together: give both (dollars per million tokens)")
    prices = None if args.price_in is None else (args.price_in, args.price_out)
    return {
        "temperature": args.temperature,
        "max_tokens_per_call": args.max_tokens_per_call,
        "llm_timeout_s": args.llm_timeout,
        "prices": prices,
        "seed_builtin": args.seed_builtin,
        "implementations": args.implementations,
    }


def add_ncu_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ncu",
        action="store_true",
        help="profile each round's fastest new candidate under Nsight Compute (CUDA; see `kforge profile`)",
    )


def _version() -> str:
    try:
        return importlib.metadata.version("kernelforge")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kforge", description="Search for faster kernels, and trust the number.")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=f"kforge {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="verify and time one candidate against a problem's reference")
    ev.add_argument("problem", help="a KernelBench problem file, or a built-in problem's name")
    ev.add_argument("candidate", help="a Python file defining ModelNew")
    ev.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ev.add_argument(
        "--policy",
        default="relaxed",
        choices=["relaxed", "strict"],
        help="relaxed: atol=rtol=1e-2; strict: 1e-4 for fp32",
    )
    add_checking_options(ev)
    ev.add_argument(
        "--seed", type=int, default=0, help="seed of the checks' input sets and the model's parameters (default 0)"
    )
    ev.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference")
    add_timing_mode(ev)
    ev.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit of the job, s (default 600)")
    ev.add_argument("--json", action="store_true", help="print the full evaluation as JSON")
    add_sandbox_options(ev)
    ev.set_defaults(func=cmd_eval)

    run = sub.add_parser("run", help="search for a faster kernel with the agent team")
    run.add_argument("problem", help="a KernelBench problem file, or a built-in problem's name")
    run.add_argument(
        "--model", default=None, help="builtin (default without $KFORGE_MODEL), openai:<name>, google_genai:<name>"
    )
    run.add_argument("--base-url", default=None, help="an OpenAI-compatible server (vLLM, Ollama, llama.cpp)")
    add_llm_options(run)
    run.add_argument("--rounds", type=int, default=3)
    run.add_argument("--ideas", type=int, default=3, help="ideas (candidates) per round")
    run.add_argument("--repairs", type=int, default=2, help="repair attempts per candidate (LLM coder)")
    run.add_argument(
        "--patience", type=int, default=2, help="stop after this many rounds without a better candidate (default 2)"
    )
    run.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    run.add_argument("--policy", default="relaxed", choices=["relaxed", "strict"])
    add_sandbox_options(run)
    run.add_argument("--roles", default=None, help="comma-separated role list (default planner,coder,profiler,critic)")
    run.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference in the baseline")
    add_ncu_option(run)
    add_checking_options(run)
    add_timing_mode(run)
    run.add_argument("--max-wall", type=float, default=None, help="wall-time budget, s (default: none)")
    run.add_argument("--max-tokens", type=int, default=None, help="LLM token budget (default: none)")
    run.add_argument("--max-dollars", type=float, default=None, help="LLM dollar budget (default: none)")
    run.add_argument("--max-gpu-s", type=float, default=None, help="budget of sandbox job seconds (default: none)")
    run.add_argument("--runs-dir", default=None, help="where run folders go (default ./runs or $KFORGE_RUNS_DIR)")
    run.set_defaults(func=cmd_run)

    batch = sub.add_parser(
        "batch", help="run the agent team on every problem of folders or globs, concurrently; one table"
    )
    batch.add_argument(
        "problems", nargs="+", help="problem files, folders (every *.py) or globs; with --merge: batch.json files"
    )
    batch.add_argument("--model", default=None, help="as for `kforge run`")
    batch.add_argument("--base-url", default=None, help="an OpenAI-compatible server (vLLM, Ollama, llama.cpp)")
    add_llm_options(batch)
    batch.add_argument("--rounds", type=int, default=3)
    batch.add_argument("--ideas", type=int, default=3, help="ideas (candidates) per round")
    batch.add_argument("--repairs", type=int, default=2, help="repair attempts per candidate (LLM coder)")
    batch.add_argument(
        "--patience", type=int, default=2, help="stop after this many rounds without a better candidate (default 2)"
    )
    batch.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    batch.add_argument("--policy", default="relaxed", choices=["relaxed", "strict"])
    add_sandbox_options(batch)
    batch.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference in the baseline")
    add_ncu_option(batch)
    add_checking_options(batch)
    add_timing_mode(batch)
    batch.add_argument("--max-wall", type=float, default=None, help="wall-time budget of each problem's run, s")
    batch.add_argument("--max-tokens", type=int, default=None, help="token budget of each problem's run")
    batch.add_argument("--max-dollars", type=float, default=None, help="dollar budget of each problem's run")
    batch.add_argument("--parallel", type=int, default=1, help="problems searched at once (default 1)")
    batch.add_argument("--budget-s", type=float, default=None, help="start no new problem after this many seconds")
    batch.add_argument("--only", default="", help="comma-separated name patterns or substrings to keep")
    batch.add_argument("--fresh-check", action="store_true", help="re-check each selected kernel on fresh seeds")
    batch.add_argument("--runs-dir", default=None, help="where run folders go (default ./runs or $KFORGE_RUNS_DIR)")
    batch.add_argument("--out", default=None, help="where batch.md and batch.json go (default: the runs dir)")
    batch.add_argument("--merge", action="store_true", help="combine the batch.json files given into one table")
    batch.add_argument(
        "--after",
        nargs="+",
        default=[],
        metavar="BATCH_JSON",
        help="earlier slices' batch.json files: take their finished rows (same source, settings and commit) instead "
        "of searching those problems again, without their run folders",
    )
    batch.set_defaults(func=cmd_batch)

    resume = sub.add_parser("resume", help="continue a stopped or crashed run")
    resume.add_argument("run", help="run id or folder")
    resume.add_argument("--runs-dir", default=None)
    resume.set_defaults(func=cmd_resume)

    trace = sub.add_parser("trace", help="show a run's candidate tree, messages and tool calls")
    trace.add_argument("run", help="run id or folder")
    trace.add_argument("--role", default=None, help="only this role's messages")
    trace.add_argument("--candidate", default=None, help="one candidate in detail")
    trace.add_argument("--json", action="store_true")
    trace.add_argument("--runs-dir", default=None)
    trace.set_defaults(func=cmd_trace)

    report = sub.add_parser("report", help="write a run's self-contained HTML report (runs/<id>/report.html)")
    report.add_argument("run", help="run id or folder")
    report.add_argument("--open", action="store_true", help="open it in a browser")
    report.add_argument("--output", default=None, help="write here instead of runs/<id>/report.html")
    report.add_argument("--runs-dir", default=None)
    report.set_defaults(func=cmd_report)

    runs = sub.add_parser("runs", help="list runs")
    runs.add_argument("--runs-dir", default=None)
    runs.set_defaults(func=cmd_runs)

    demo = sub.add_parser("demo", help="run the builtin team on the default built-in problem")
    demo.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    demo.set_defaults(func=cmd_demo)

    box = sub.add_parser("sandbox", help="manage the docker sandbox: build its image, clean up containers")
    box.add_argument("action", choices=["build", "clean"])
    box.add_argument("--tag", default="kforge-sandbox:host", help="image tag to build (default kforge-sandbox:host)")
    box.set_defaults(func=cmd_sandbox)

    add_profile_parser(sub)

    doctor = sub.add_parser("doctor", help="report GPU, CUDA, NVRTC, compiler, Docker and provider keys")
    doctor.set_defaults(func=cmd_doctor)
    for command in sub.choices.values():  # `kforge eval ... -v` as well as `kforge -v eval ...`
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Provider keys leave the environment before anything else runs: no process kforge starts (a batch's
    # fork server, a Ray head, a sandbox worker) inherits them, and /proc/<pid>/environ no longer shows
    # them. The model client gets its key from tools.keys.
    keys.take_from_environment()
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if getattr(args, "model", "unset") is None:
        args.model = os.environ.get("KFORGE_MODEL") or "builtin"
    if getattr(args, "checks", 1) < 1 or getattr(args, "trials", 1) < 1:
        parser.error("--checks and --trials must be at least 1")
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, where a reader that went away can be told from an error
        return code
    except BrokenPipeError:
        # `kforge trace RUN --json | head`: the reader stopped reading, which is not an error of ours. Exit as a
        # program the pipe's signal ended, with nothing more written to the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KernelforgeError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"kforge: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
