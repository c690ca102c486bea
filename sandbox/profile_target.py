"""The process ncu profiles: ``python -m sandbox.profile_target --job FILE --contender NAME --error-file F``.

It builds one contender (the problem's ``Model`` eager or under ``torch.compile``, or the candidate's
``ModelNew`` with the reference's weights) and the job's seeded inputs, calls it ``warmup`` times, then
opens the profiler range for exactly one more call. ncu runs with ``--profile-from-start off``, so only
that call's kernels are measured (it flushes the caches before each, so the repeated inputs are not
warm). A failure is written, one line, to the error file for the worker to report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tools.problem import build_model, copy_parameters, exec_source, import_source, make_inputs, one_line
from tools.protocol import ProfileJob


def contender_model(job: ProfileJob, contender: str, device: torch.device) -> tuple[nn.Module, list[Any]]:
    problem = exec_source(job.problem_source, job.problem_name, "problem")
    init = list(problem.get_init_inputs())
    reference = build_model(problem.Model, init, device, job.seed)
    inputs = make_inputs(problem.get_inputs, device, job.seed)
    if contender == "eager":
        return reference, inputs
    if contender == "compile":
        return torch.compile(reference), inputs  # type: ignore[return-value]
    assert job.candidate_source is not None  # ProfileJob's validator
    module = import_source(job.candidate_source, job.candidate_name, "candidate")
    model_cls = getattr(module, "ModelNew", None)
    if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
        raise TypeError("the candidate defines no `ModelNew` nn.Module subclass")
    candidate = build_model(model_cls, init, device, job.seed)
    copy_parameters(reference, candidate)
    return candidate, inputs


def profiled_call(job: ProfileJob, contender: str) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    model, inputs = contender_model(job, contender, device)
    with torch.no_grad():
        for _ in range(job.warmup):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.profile_target", description=__doc__)
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--contender", required=True, choices=["eager", "compile", "candidate"])
    parser.add_argument("--error-file", required=True, type=Path)
    args = parser.parse_args(argv)
    job = ProfileJob.model_validate_json(args.job.read_text())
    try:
        profiled_call(job, args.contender)
    except Exception as exc:  # reported through the error file; the worker turns it into the job's reason
        args.error_file.write_text(one_line(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
