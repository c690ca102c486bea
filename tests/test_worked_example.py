"""The worked example the LLM coder is shown (agents/prompts/examples): each target's candidate is verified for real,
so the example can never teach a format the harness refuses."""

from __future__ import annotations

import pytest
import torch

from agents.llm_roles import EXAMPLES, worked_example
from sandbox.evaluation import evaluate
from sandbox.local import LocalSandbox
from tools.checks import blocking, static_findings
from tools.compile import check_candidate_cuda
from tools.problem import load_problem
from tools.protocol import TimingConfig

PROBLEM = EXAMPLES / "scaled_tanh.py"
QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)


def judge(device: str):  # type: ignore[no-untyped-def]
    return evaluate(
        load_problem(PROBLEM),
        (EXAMPLES / f"scaled_tanh_{device}.py").read_text(),
        sandbox=LocalSandbox(),
        device=device,  # type: ignore[arg-type]
        available_bytes=8 << 30,
        candidate_name=f"scaled_tanh_{device}.py",
        references=("eager",),
        n_checks=3,
        timing=QUICK,
        with_roofline=False,
    )


def test_the_cpu_example_is_accepted_by_the_harness() -> None:
    ev = judge("cpu")
    assert ev.accepted, (ev.status, ev.result.reason, ev.result.details, ev.anti_cheat)
    assert ev.result.timing is not None and ev.result.timing.stats["candidate"].trials >= 5


def test_the_cuda_example_compiles_with_nvrtc_and_passes_the_static_checks() -> None:
    source = (EXAMPLES / "scaled_tanh_cuda.py").read_text()
    reports = check_candidate_cuda(source)
    assert reports and all(r.ok for r in reports), [r.log for r in reports]
    findings = static_findings(source, load_problem(PROBLEM).info)
    assert not blocking(findings, "strict"), findings


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_example_is_accepted_by_the_harness() -> None:
    ev = judge("cuda")
    assert ev.accepted, (ev.status, ev.result.reason, ev.result.details, ev.anti_cheat)


def test_each_target_is_shown_its_own_example() -> None:
    cpu, cuda = worked_example("cpu"), worked_example("cuda")
    assert "load_c(C_SRC" in cpu and "cupy" not in cpu
    assert "cupy.RawModule" in cuda and "load_c" not in cuda
    assert PROBLEM.read_text().rstrip("\n") in cpu and PROBLEM.read_text().rstrip("\n") in cuda
