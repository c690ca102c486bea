"""Static checks before anything runs, and no false rejections of harmless code (issue 37).

Real candidates for ``problems/softmax_small.py``, evaluated end to end on the CPU through the local sandbox:

- one that writes a marker file when imported and also starts a thread (a construct the static checks
  reject): ``evaluate`` rejects it from its source alone, and the marker is never written. The same candidate
  run with the pre-check off writes it, which shows that the marker's absence means nothing ran.
- one that prints debug lines using the worker's verdict words (``status: non-finite output``), and one that
  imports threading only for a ``Lock``: both correct, both accepted. What is still rejected beside them (a
  printed JSON record with a "status" key, a started thread) is checked on the source.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sandbox.evaluation import Evaluation, evaluate
from sandbox.local import LocalSandbox
from tests.conftest import PROBLEMS
from tools.checks import static_findings
from tools.problem import Problem, load_problem
from tools.protocol import TimingConfig

QUICK = TimingConfig(min_trials=5, min_seconds=0.0, warmup_trials=1)
SANDBOX = LocalSandbox()
# A correct softmax over dim 1 that avoids the reference's own op; each candidate below adds one thing to it.
SOFTMAX = "e = (x - x.amax(dim=1, keepdim=True)).exp()\nout = e / e.sum(dim=1, keepdim=True)\n"


def problem() -> Problem:
    return load_problem(PROBLEMS / "softmax_small.py")


def candidate(module_code: str, forward_code: str = "") -> str:
    """A ModelNew whose forward computes SOFTMAX into ``out``, with ``module_code`` at module level and
    ``forward_code`` (which may read ``x`` and ``out``) before it returns."""
    body = textwrap.indent(SOFTMAX + forward_code + "return out\n", " " * 8)
    return (
        "import torch\nfrom torch import nn\n\n"
        + textwrap.dedent(module_code).strip()
        + "\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        + body
    )


def run(source: str, **kw: bool) -> Evaluation:
    return evaluate(
        problem(),
        source,
        sandbox=SANDBOX,
        device="cpu",
        available_bytes=8 << 30,
        candidate_name="candidate.py",
        references=("eager",),
        n_checks=3,
        timing=QUICK,
        timeout_s=120,
        with_roofline=False,
        **kw,
    )


def test_a_candidate_the_static_checks_reject_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    source = candidate(
        f"""
        import threading
        from pathlib import Path

        print("the candidate ran", flush=True)
        Path({str(marker)!r}).write_text("the candidate ran")
        """,
        "threading.Thread(target=out.sum).start()\n",
    )
    ev = run(source)
    assert not marker.exists(), "the candidate's module code ran although the static checks reject it"
    assert not ev.accepted and ev.result.status == "rejected", ev.result
    assert ev.result.reason.startswith("thread:"), ev.result.reason
    assert any(f.startswith("thread at line") for f in ev.anti_cheat), ev.anti_cheat
    assert ev.rejected_unrun and ev.result.exit_code is None and ev.result.correctness is None

    # The control: with the pre-check off the same source runs (it says so; its marker lands on the host only
    # where the job's files are not contained, sandbox.contain), and is still rejected.
    ran = run(source, static_precheck=False)
    assert "the candidate ran" in ran.result.stdout_tail and not ran.rejected_unrun, ran.result
    assert not ran.accepted and any(f.startswith("thread at line") for f in ran.anti_cheat), ran.anti_cheat


def test_a_reduced_precision_finding_alone_does_not_stop_the_job_under_relaxed() -> None:
    # Policy-dependent findings are not blocking under `relaxed`: the job runs, and the finding is reported.
    ev = run(candidate("", "out = out.half().float()\n"))
    assert ev.accepted, ev.result
    assert ev.result.exit_code == 0 and any(f.startswith("precision_downgrade") for f in ev.reduced_precision)


VERDICT_WORDS = candidate(
    """
    print("status: ok (debug build)")
    """,
    'if not torch.isfinite(out).all():\n    print("status: non-finite output")\nprint(f"status: {out.shape} done")\n',
)
LOCK_ONLY = candidate(
    """
    import threading

    _LOCK = threading.Lock()
    _CALLS = threading.local()
    """,
    "with _LOCK:  # a counter several callers may bump: guarded, no thread started\n"
    "    _CALLS.n = getattr(_CALLS, 'n', 0) + 1\n",
)


@pytest.mark.parametrize("source", [VERDICT_WORDS, LOCK_ONLY], ids=["verdict_words_printed", "threading_lock"])
def test_harmless_code_the_checks_once_rejected_is_accepted(source: str) -> None:
    assert static_findings(source, problem().info) == []
    ev = run(source)
    assert ev.accepted, (ev.result.status, ev.result.reason, ev.anti_cheat)
    assert ev.result.correctness is not None and ev.result.timing is not None


def test_printed_words_reach_the_output_but_never_the_verdict() -> None:
    ev = run(VERDICT_WORDS)
    assert "status: ok (debug build)" in ev.result.stdout_tail + ev.result.stderr_tail
    assert ev.result.status == "ok"


@pytest.mark.parametrize(
    ("trick", "module_code", "forward_code"),
    [
        ("verdict_forgery", "import json", 'print(json.dumps({"status": "ok"}))\n'),
        ("verdict_forgery", "", 'print(\'{"status": "ok", "speedup": 9.0}\')\n'),
        ("verdict_forgery", "import sys\nimport json", 'sys.stdout.write(json.dumps(dict(status="ok")))\n'),
        ("thread", "from threading import Thread", "Thread(target=out.sum).start()\n"),
        ("thread", "import threading", "threading.Timer(0.0, out.sum).start()\n"),
        ("thread", "import threading", "threading.current_thread().__class__(target=out.sum).start()\n"),
        ("thread", "import threading\n_t = threading", "_t.Thread(target=out.sum).start()\n"),
        ("thread", "import threading\n\ndef make(m):\n    return m.Thread", "make(threading)(target=out.sum)\n"),
        ("thread", "from threading import *", "Thread(target=out.sum).start()\n"),
        ("thread", "import threading", "threading.Lock.__self__.start_new_thread(out.sum, ())\n"),
        ("thread", "", "[__import__('threading')][0].Thread(target=out.sum).start()\n"),
    ],
)
def test_what_is_still_rejected_beside_them(trick: str, module_code: str, forward_code: str) -> None:
    found = static_findings(candidate(module_code, forward_code), problem().info)
    assert trick in {f.trick for f in found}, found
