"""The ``kforge`` command, run as a real subprocess: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
FIXTURES = ROOT / "tests" / "fixtures" / "candidates"
SOFTMAX_CPU = "problems/candidates/softmax_cpu.py"
FAST = ("--device", "cpu", "--no-compile", "--min-seconds", "0.1", "--trials", "20")
BUILTIN_NAMES = sorted(p.stem for p in PROBLEMS.glob("*.py") if not p.name.startswith("_"))

BAD_PROBLEM = """\
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    raise RuntimeError("no inputs today")


def get_init_inputs():
    return []
"""


def kforge(cache: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "KFORGE_CACHE_DIR": str(cache), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "graphs.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a failed command, checked to be a single ``kforge: error:`` line."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kforge: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def bad_problem(tmp_path: Path) -> Path:
    path = tmp_path / "bad_problem.py"
    path.write_text(BAD_PROBLEM)
    return path


# ------------------------------------------------------------------------------------- bad input


def test_bad_problem_is_one_line_error(kforge_cache: Path, bad_problem: Path) -> None:
    proc = kforge(kforge_cache, "eval", str(bad_problem), SOFTMAX_CPU, "--device", "cpu")
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert str(bad_problem) in line
    assert "get_inputs()" in line and "no inputs today" in line
    assert proc.stdout == ""


@pytest.fixture(scope="module")
def verbose_bad_problem_run(
    kforge_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    path = tmp_path_factory.mktemp("verbose") / "bad_problem.py"
    path.write_text(BAD_PROBLEM)
    return kforge(kforge_cache, "--verbose", "eval", str(path), SOFTMAX_CPU, "--device", "cpu")


def test_bad_problem_verbose_shows_traceback(verbose_bad_problem_run: subprocess.CompletedProcess[str]) -> None:
    proc = verbose_bad_problem_run
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "ProblemError" in proc.stderr
    assert "no inputs today" in proc.stderr


def test_bad_problem_verbose_keeps_exit_code(verbose_bad_problem_run: subprocess.CompletedProcess[str]) -> None:
    assert verbose_bad_problem_run.returncode == 2


@pytest.mark.parametrize("command", ["run", "batch"])
def test_a_price_without_its_other_half_is_one_line_error(kforge_cache: Path, command: str) -> None:
    proc = kforge(kforge_cache, command, "problems/softmax_small.py", "--device", "cpu", "--price-in", "1.5")
    assert proc.returncode == 2, proc.stderr
    assert "--price-in and --price-out go together" in one_line_error(proc)


def test_missing_candidate(kforge_cache: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_candidate.py"
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(missing), "--device", "cpu")
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert str(missing) in line and "no such candidate file" in line


def test_candidate_python_syntax_error(kforge_cache: Path, tmp_path: Path) -> None:
    candidate = tmp_path / "broken_candidate.py"
    candidate.write_text("import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n")
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(candidate), "--device", "cpu")
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert str(candidate) in line
    assert "syntax error at line 3" in line


def test_unknown_problem_name_lists_builtins(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "eval", "no_such_problem_xyz", SOFTMAX_CPU, "--device", "cpu")
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert "no_such_problem_xyz" in line
    assert BUILTIN_NAMES
    for name in BUILTIN_NAMES:
        assert name in line


def test_bad_option_value(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "eval", "softmax_small", SOFTMAX_CPU, "--device", "cpu", "--trials", "0")
    assert proc.returncode == 2
    assert "--trials" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_device_cuda_without_gpu(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "eval", "softmax_small", SOFTMAX_CPU, "--device", "cuda")
    assert proc.returncode == 3, proc.stderr
    line = one_line_error(proc)
    assert "GPU" in line or "cuda" in line.lower()


# ------------------------------------------------------------------------------------ evaluations


def test_eval_correct_cpu_candidate(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", SOFTMAX_CPU, *FAST, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evaluation = as_json(proc)
    assert evaluation["problem"] == "softmax_small"
    assert evaluation["candidate"] == SOFTMAX_CPU
    assert evaluation["device"] == "cpu"
    result = evaluation["result"]
    assert result["status"] == "ok", result["reason"]

    correctness = result["correctness"]
    assert correctness["passed"] is True
    assert len(correctness["checks"]) == 5
    assert all(check["passed"] for check in correctness["checks"])
    assert len({check["seed"] for check in correctness["checks"]}) == 5
    assert all(check["max_abs_error"] <= 1e-2 for check in correctness["checks"])

    stats = result["timing"]["stats"]
    assert set(stats) == {"eager", "candidate"}  # --no-compile: no torch.compile contender
    for name in ("eager", "candidate"):
        assert stats[name]["trials"] >= 20
        assert 0 < stats[name]["min_ms"] <= stats[name]["median_ms"]

    floor = evaluation["floor"]
    assert floor is not None
    assert floor["floor_ms"] > 0
    assert floor["bound"] in ("memory", "compute")
    assert evaluation["ceilings"]["device"] == "cpu"


def test_eval_wrong_cpu_candidate(kforge_cache: Path) -> None:
    candidate = str(FIXTURES / "wrong_softmax_cpu.py")
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", candidate, *FAST, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = as_json(proc)["result"]
    assert result["status"] == "incorrect"
    assert result["correctness"]["passed"] is False
    assert not any(check["passed"] for check in result["correctness"]["checks"])


def test_eval_c_compile_error(kforge_cache: Path) -> None:
    path = FIXTURES / "syntax_error_cpu.py"
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(path), *FAST, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = as_json(proc)["result"]
    assert result["status"] == "compile_error"
    assert "row_max" in result["reason"]
    lines = path.read_text().splitlines()
    marked = next(i for i, line in enumerate(lines, 1) if "COMPILE ERROR ON THIS LINE" in line)
    assert f"line {marked}" in result["reason"]  # the candidate file's own line, not the C source's
    assert result["timing"] is None


def test_builtin_problem_by_name(kforge_cache: Path) -> None:
    candidate = str(FIXTURES / "syntax_error_cpu.py")
    proc = kforge(kforge_cache, "eval", "softmax_small", candidate, *FAST, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    evaluation = as_json(proc)
    assert evaluation["problem"] == "softmax_small"
    assert Path(evaluation["problem_path"]).resolve() == PROBLEMS / "softmax_small.py"
    assert evaluation["result"]["status"] == "compile_error"


def test_eval_text_output(kforge_cache: Path) -> None:
    candidate = str(FIXTURES / "wrong_softmax_cpu.py")
    proc = kforge(kforge_cache, "eval", "softmax_small", candidate, *FAST, "--checks", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict      incorrect:" in proc.stdout
    assert "0/2 checks passed" in proc.stdout


# ----------------------------------------------------------------------------------------- doctor


def test_doctor(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "doctor", env={"OPENAI_API_KEY": "sk-test"})
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^nvrtc\s+\d+\.\d+\s*$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^python\s+3\.", proc.stdout, re.MULTILINE)
    assert re.search(r"^torch\s+", proc.stdout, re.MULTILINE)
    keys = re.search(r"^llm keys\s+(.*)$", proc.stdout, re.MULTILINE)
    assert keys is not None, proc.stdout
    assert "OPENAI_API_KEY" in keys.group(1)
    assert "sk-test" not in proc.stdout
    assert "sk-test" not in proc.stderr


def test_eval_rejects_an_anti_cheat_finding_even_when_the_answer_is_right(kforge_cache: Path) -> None:
    cheat = ROOT / "tests" / "fixtures" / "cheats" / "reference_op_fallback.py"
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(cheat), *FAST, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    evaluation = as_json(proc)
    # It computes the right answer, by calling softmax itself: the source shows it, so it is rejected without
    # running (the worker catching it too is tests/test_runtime_checks.py's).
    assert evaluation["result"]["status"] == "rejected" and evaluation["rejected_unrun"]
    assert evaluation["result"]["reason"].startswith("reference_op: ")
    assert evaluation["anti_cheat"] and evaluation["anti_cheat"][0].startswith("reference_op at line")


def test_reading_runs_does_not_import_torch(tmp_path: Path) -> None:
    # `kforge runs`, `trace` and `report` only read run folders: importing torch would cost them seconds.
    code = "import sys; sys.modules['torch'] = None; from graphs.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "KFORGE_RUNS_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code, "runs"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_eval_says_when_the_relaxed_policy_lets_reduced_precision_through(kforge_cache: Path) -> None:
    bf16 = str(ROOT / "tests" / "fixtures" / "cheats" / "precision_downgrade_bf16.py")
    proc = kforge(kforge_cache, "eval", "softmax_small", bf16, *FAST, "--checks", "2", "--policy", "relaxed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("  PRECISION ")]
    assert "reduced, which the relaxed policy allows within its tolerance: precision_downgrade at line 9" in line
    proc = kforge(kforge_cache, "eval", "softmax_small", bf16, *FAST, "--checks", "2", "--policy", "strict")
    assert proc.returncode == 1 and "REJECTED     anti-cheat: precision_downgrade at line 9" in proc.stdout
    assert "PRECISION" not in proc.stdout


# ------------------------------------------------------------------------------------- edges


def test_verbose_is_taken_after_the_command_too(kforge_cache: Path, bad_problem: Path) -> None:
    proc = kforge(kforge_cache, "eval", str(bad_problem), SOFTMAX_CPU, "--device", "cpu", "-v")
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "ProblemError" in proc.stderr, proc.stderr


def test_version(kforge_cache: Path) -> None:
    proc = kforge(kforge_cache, "--version")
    assert proc.returncode == 0 and re.fullmatch(r"kforge \S+\n", proc.stdout), proc.stdout + proc.stderr


def test_a_folder_is_not_a_problem_nor_a_candidate(kforge_cache: Path, tmp_path: Path) -> None:
    proc = kforge(kforge_cache, "eval", str(tmp_path), SOFTMAX_CPU, "--device", "cpu")
    assert proc.returncode == 2
    assert "a folder, not a problem file (`kforge batch` takes folders)" in one_line_error(proc)
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 2 and "a folder, not a candidate file" in one_line_error(proc)


def test_a_candidate_without_modelnew_is_refused_before_any_job(kforge_cache: Path, tmp_path: Path) -> None:
    candidate = tmp_path / "no_model.py"
    candidate.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n")
    proc = kforge(kforge_cache, "eval", "problems/softmax_small.py", str(candidate), "--device", "cpu")
    assert proc.returncode == 2 and "defines no `ModelNew`" in one_line_error(proc)


@pytest.mark.parametrize(
    "source",
    [
        "class ModelNew: ...",
        "ModelNew = 1",
        "from mod import Thing as ModelNew",
        "from mod import *",
        "if True:\n    class ModelNew: ...",
        "def ModelNew(): ...",
    ],
)
def test_every_way_to_bind_modelnew_counts(source: str) -> None:
    from sandbox.evaluation import defines

    assert defines(source, "ModelNew")
    assert not defines(source.replace("ModelNew", "Other").replace("*", "Other"), "ModelNew")


def test_the_trace_hint_names_a_runs_folder_only_where_trace_would_not_look(tmp_path: Path) -> None:
    from graphs.cli import trace_hint
    from graphs.runs import runs_root

    default = runs_root() / "r1"
    assert "--runs-dir" not in trace_hint(default)
    assert f"kforge trace r2 --runs-dir {tmp_path} · kforge report r2 --runs-dir {tmp_path} --open" in trace_hint(
        tmp_path / "r2"
    )
