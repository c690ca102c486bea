"""``kforge profile``: one call of each contender under Nsight Compute, kernel by kernel.

Two forms: ``kforge profile PROBLEM [CANDIDATE]`` for files, and ``kforge profile --run RUN
[--candidate ID]`` for a run's candidate (its best by default), whose profile is saved as
``candidates/<id>/profile.json`` where ``kforge report`` shows it. A profile measures; it never judges:
``kforge eval`` gives the verdict and the timings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tools.errors import ConfigError, EnvironmentProblem

if TYPE_CHECKING:
    from tools.problem import Problem

EXIT_OK, EXIT_FAILED = 0, 1
CONTENDERS = ("eager", "compile", "candidate")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from graphs.cli_options import add_sandbox_options

    parser = sub.add_parser(
        "profile", help="profile one call of a candidate and the reference under Nsight Compute, kernel by kernel"
    )
    parser.add_argument("problem", nargs="?", help="a KernelBench problem file or a built-in problem's name")
    parser.add_argument("candidate", nargs="?", help="a Python file defining ModelNew (none: the reference alone)")
    parser.add_argument("--run", default=None, help="profile a run's candidate instead: a run id or folder")
    parser.add_argument(
        "--candidate", dest="candidate_id", default=None, help="with --run: a candidate id (default: the best)"
    )
    parser.add_argument("--runs-dir", default=None)
    parser.add_argument(
        "--contenders",
        default=None,
        help="comma-separated, of eager, compile, candidate (default: eager and, when there is one, the candidate)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one (default 3)")
    parser.add_argument("--ncu", default=None, help="path of ncu where jobs run (default: PATH, then CUDA's folders)")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall-clock limit of the job in seconds")
    parser.add_argument("--output", default=None, help="also write the profile as JSON here")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    add_sandbox_options(parser)
    parser.set_defaults(func=cmd_profile)
    return parser


def _contenders(text: str | None, has_candidate: bool) -> list[str]:
    if text is None:
        return ["eager", "candidate"] if has_candidate else ["eager"]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown or not names:
        raise ConfigError(f"--contenders {text!r}: name some of {', '.join(CONTENDERS)}, separated by commas")
    if "candidate" in names and not has_candidate:
        raise ConfigError("--contenders names the candidate, but no candidate was given")
    return list(dict.fromkeys(names))


def _target(args: argparse.Namespace) -> tuple[Problem, str | None, str, Path | None]:
    """(problem, candidate source, candidate name, where the profile is saved) from either form."""
    from graphs.cli_options import resolve_problem
    from sandbox.evaluation import read_candidate
    from tools.problem import load_problem

    if args.run is None:
        if args.candidate_id:
            raise ConfigError("--candidate ID names a run's candidate: use it with --run (a file goes after PROBLEM)")
        if not args.problem:
            raise ConfigError("give a problem (and a candidate file), or --run RUN")
        source = read_candidate(args.candidate) if args.candidate else None
        return load_problem(resolve_problem(args.problem)), source, str(args.candidate or ""), None
    if args.problem:
        raise ConfigError("give a problem and candidate files, or --run RUN, not both")
    from graphs.rundata import load_run
    from graphs.runs import runs_root

    run = load_run(args.run, runs_root(args.runs_dir))
    cid = args.candidate_id or run.best_id
    if cid is None:
        raise ConfigError(f"run {run.run_id}: the reference stands, no candidate is best; name one with --candidate")
    record = run.candidate(cid)
    if record is None:
        known = ", ".join(c.id for c in run.candidates) or "none yet"
        raise ConfigError(f"--candidate {cid}: no such candidate in run {run.run_id} (candidates: {known})")
    if run.problem_source is None:
        raise ConfigError(f"run {run.run_id}: its problem file {run.problem.get('path')} is gone or has changed")
    return load_problem(run.problem["path"]), record.source, f"{cid}.py", run.dir / "candidates" / cid / "profile.json"


def cmd_profile(args: argparse.Namespace) -> int:
    from graphs.cli_options import sandbox_config
    from sandbox.backends import job_machine, make_sandbox
    from sandbox.evaluation import profile_job
    from tools import ncu
    from tools.device import cuda_available

    if args.warmup < 1:
        raise ConfigError("--warmup must be at least 1 (the first call compiles)")
    problem, source, name, saved = _target(args)
    contenders = _contenders(args.contenders, source is not None)
    job = profile_job(
        problem,
        source if "candidate" in contenders else None,
        candidate_name=name or "candidate.py",
        contenders=contenders,
        seed=args.seed,
        warmup=args.warmup,
        ncu=args.ncu,
        timeout_s=args.timeout,
    )
    sandbox = sandbox_config(args)
    if sandbox.type != "ray" and not cuda_available():  # a Ray cluster says for itself, in job_machine
        raise EnvironmentProblem("profiling needs a CUDA GPU, and none is visible here")
    job_machine(sandbox, "cuda")
    result = make_sandbox(sandbox).run(job)
    if result.status != "ok" or result.profile is None:
        print(f"kforge: profile failed ({result.status}): {result.reason}", file=sys.stderr)
        if args.verbose and (result.details or result.stderr_tail):
            print(result.details or result.stderr_tail, file=sys.stderr)
        return EXIT_FAILED
    report = result.profile.model_copy(update={"problem_bytes": problem.info.bytes_moved})
    for path in filter(None, (saved, Path(args.output) if args.output else None)):
        path.write_text(report.model_dump_json(indent=1))
    print(report.model_dump_json(indent=1) if args.json else ncu.render(report, problem.name, args.warmup))
    if saved and not args.json:
        print(f"saved {saved}")
    return EXIT_OK
