"""The judge and the runner (sandbox.runner): a CPU job's candidate runs in a process of its own, and nothing it
does there decides its verdict. Each case runs the real worker on the local backend."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from sandbox import contain, seccomp, shared
from sandbox.local import LocalSandbox
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tools.protocol import EvalJob, JobResult, TimingConfig

SANDBOX = LocalSandbox()
QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)


def run(candidate: Path, separate: bool = True, time_it: bool = False) -> JobResult:
    return SANDBOX.run(
        EvalJob(
            problem_name="softmax_small.py",
            problem_source=(PROBLEMS / "softmax_small.py").read_text(),
            candidate_name=candidate.name,
            candidate_source=candidate.read_text(),
            device="cpu",
            references=["eager"],
            n_checks=2,
            timing=QUICK,
            time_candidate=time_it,
            separate_candidate=separate,
            timeout_s=120,
        )
    )


def test_a_candidate_that_replaces_the_comparison_and_silences_the_watch_is_judged_on_its_answers() -> None:
    # In the process that judges it, the fixture is accepted: the proof that its route reaches the harness and
    # leaves nothing that would say no (the candidate-in-the-worker path CUDA jobs still take).
    fooled = run(FIXTURES / "judge" / "silenced_comparison.py", separate=False)
    assert fooled.status == "ok" and not fooled.findings, (fooled.status, fooled.reason, fooled.findings)
    result = run(FIXTURES / "judge" / "silenced_comparison.py")
    assert result.status == "incorrect", (result.status, result.reason)
    assert "outside atol" in result.reason
    assert result.environment["candidate_process"].startswith("its own (the runner")


def test_a_correct_candidate_is_checked_and_timed_through_the_runner() -> None:
    result = run(CANDIDATES / "softmax_cpu.py", time_it=True)
    assert result.status == "ok", result.reason + result.details
    assert result.correctness is not None and all(c.passed for c in result.correctness.checks)
    assert result.timing is not None and result.timing.stats["candidate"].trials >= 5
    assert result.environment["candidate_process"].startswith("its own (the runner")
    assert result.memory is not None and result.memory.peak_bytes > 0
    assert int(result.environment["cores"]) >= 1  # the hardware sheet's facts (agents.hardware), from the judge


def test_nothing_of_the_candidate_s_leaves_the_group_the_judge_stops_or_traces_another_process() -> None:
    """A child of the runner that calls setsid would run on while the judge times the reference (the judge stops the
    runner's process group); the runner's seccomp filter (sandbox.seccomp) refuses it, setpgid and ptrace."""
    result = run(FIXTURES / "judge" / "group_escape.py")
    said = "SETSID refused: Operation not permitted; SETPGID refused: Operation not permitted; PTRACE refused: "
    assert said + "Operation not permitted" in result.stdout_tail, result.stdout_tail + result.stderr_tail
    assert result.environment["candidate_process"].startswith("its own (the runner")


def test_the_filter_refuses_what_it_names_on_this_machine_and_allows_the_rest() -> None:
    """In a forked child, the filter installed: the refused calls fail with EPERM, an ordinary one works."""

    def filtered() -> str:
        seccomp.install()
        said = []
        for name, call in (("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0))):
            try:
                call()
                said.append(f"{name} allowed")
            except PermissionError:
                said.append(f"{name} refused")
        return ", ".join([*said, f"getpid {'works' if os.getpid() > 0 else 'fails'}"])

    assert contain.in_child(filtered) == "setsid refused, setpgid refused, getpid works"


def test_the_judge_s_memory_and_environment_are_out_of_the_candidate_s_reach() -> None:
    # The runner is the judge's fork, same user: the judge is undumpable and the runner holds no capability
    result = run(FIXTURES / "judge" / "read_judge.py")
    assert result.status == "ok", result.reason + result.details
    lines = [x for x in result.stdout_tail.splitlines() if x.startswith("JUDGE")]
    assert len(lines) == 2 and all(": blocked" in x for x in lines), result.stdout_tail


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ({"kind": "tensor", "dtype": "float32", "shape": [2, 3], "stride": [3, 1], "written": True}, None),
        ({"kind": "tensor", "dtype": "float32", "shape": [4, 4], "stride": [4, 1], "written": True}, "meta"),
        ({"kind": "tensor", "dtype": "no_such_dtype", "shape": [2], "stride": [1], "written": True}, "malformed"),
        ({"kind": "tensor", "dtype": "float32", "shape": [-1], "stride": [1], "written": True}, "malformed"),
        ({"kind": "other", "type": "FakeTensor"}, "FakeTensor"),
        ([1, 2], "unknown"),
    ],
)
def test_the_judge_reads_an_output_only_as_plain_values_in_its_own_memory(meta: object, why: str | None) -> None:
    slot, fd = shared.make_slot(6 * 4)
    os.close(fd)
    torch.frombuffer(slot, dtype=torch.float32, count=6).copy_(torch.arange(6.0))
    out = shared.read_output(meta, slot, torch.device("cpu"))
    if why is None:
        assert type(out) is torch.Tensor and torch.equal(out, torch.arange(6.0).view(2, 3))
        torch.frombuffer(slot, dtype=torch.float32, count=6).fill_(7.0)  # a later write by the runner
        assert torch.equal(out, torch.arange(6.0).view(2, 3))  # is not in the judge's copy
    elif why == "meta":  # larger than its slot: not read; its shape alone fails the comparison
        assert isinstance(out, torch.Tensor) and out.device.type == "meta" and tuple(out.shape) == (4, 4)
    else:
        assert isinstance(out, shared.Foreign) and why in type(out).__name__


def test_a_runner_killed_mid_call_is_a_crash_of_the_candidate_not_of_the_judge() -> None:
    result = run(FIXTURES / "judge" / "kill_self.py")
    assert result.status == "crashed", result.reason
    assert f"killed by {signal.Signals.SIGKILL.name}" in result.reason
    assert result.reason.startswith("running the candidate")
