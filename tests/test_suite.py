"""The benchmark suite: its problems load cheaply and fit an H200; bench/suite.py runs the real team.

The suite problems are H200-sized (256 MiB to 1 GiB per input), so they are only ever described on
meta tensors here. ``bench/suite.py`` itself runs for real on two CPU-sized problems: the builtin team,
the sandbox, the fresh-seed re-check, the table and the JSON, then a resumed call that reuses the runs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from graphs.batch.rows import tried
from tests.conftest import PROBLEMS, ROOT
from tools.problem import TensorSpec, check_fits, load_problem

SUITE = sorted((PROBLEMS / "suite").glob("*.py"))
H200_BYTES = 139 << 30
MIB = 1 << 20
# The family each suite problem was written for, by file-name prefix (the builtin team may or may not
# recognise it: that is what the suite measures).
FAMILY_BY_PREFIX = {
    "relu": "elementwise",
    "gelu": "elementwise",
    "swish": "elementwise",
    "leaky_relu": "elementwise",
    "tanh_scale": "elementwise",
    "hardswish": "elementwise",
    "elementwise_chain5": "elementwise",
    "sum_": "reduction",
    "mean_": "reduction",
    "max_": "reduction",
    "min_": "reduction",
    "argmax_": "reduction",
    "argmin_": "reduction",
    "softmax_": "softmax",
    "log_softmax_": "softmax",
    "layernorm_": "layernorm",
    "rmsnorm_": "rmsnorm",
    "matmul_8192": "matmul",
    "bmm_": "matmul",
    "gemm_bias_relu_": "epilogue",
    "matmul_gelu_scale_": "epilogue",
    "conv2d_": "epilogue",
}


def family_of(path: Path) -> str:
    matches = [f for prefix, f in FAMILY_BY_PREFIX.items() if path.stem.startswith(prefix)]
    assert len(matches) == 1, f"{path.stem}: name it after its family ({matches})"
    return matches[0]


# ------------------------------------------------------------------------------------- problems


def test_the_suite_has_at_least_20_problems_covering_every_family() -> None:
    assert len(SUITE) >= 20
    families = {family_of(p) for p in SUITE}
    assert families == {"elementwise", "reduction", "softmax", "layernorm", "rmsnorm", "matmul", "epilogue"}


@pytest.mark.parametrize("path", SUITE, ids=lambda p: p.stem)
def test_suite_problem_loads_on_meta_and_fits_an_h200(path: Path) -> None:
    start = time.perf_counter()
    info = load_problem(path).info
    # Described on meta tensors: nothing of the 256 MiB – 1 GiB inputs is materialised on the CPU.
    assert info.analysed_on == "meta"
    assert time.perf_counter() - start < 10
    tensors = [s for s in info.inputs if isinstance(s, TensorSpec)]
    assert tensors and all(s.dtype == "float32" for s in tensors)
    assert info.outputs and all(s.nbytes > 0 for s in info.outputs)
    # One input set stays within ~2 GiB (the worker holds several), and the whole working set fits.
    assert info.input_bytes + info.output_bytes <= 2 << 30
    check_fits(info, "cuda", H200_BYTES)
    # Sized to keep an H200 busy rather than launch-bound.
    family = family_of(path)
    if family in ("elementwise", "reduction"):
        assert info.input_bytes >= 256 * MIB, "the issue-4 target: elementwise and reductions at >= 256 MiB"
    elif family in ("matmul", "epilogue"):
        assert info.flops >= 30e9
    else:
        assert info.input_bytes >= 256 * MIB


@pytest.mark.parametrize("path", SUITE, ids=lambda p: p.stem)
def test_suite_problem_creates_its_inputs_like_kernelbench(path: Path) -> None:
    """Inputs come from torch.randn on the default device (no device argument), so the harness can
    create them straight on the GPU under a device context, as it does for every KernelBench file."""
    source = path.read_text()
    assert "torch.randn(" in source
    assert "device" not in source and ".cuda" not in source and ".to(" not in source


# ----------------------------------------------------------------------------------- the script

SORT_SMALL = '''"""Row sort on a small tensor: no builtin family applies to it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1)[0]


def get_inputs():
    x = torch.randn(64, 512)
    return [x]


def get_init_inputs():
    return []
'''

FAST = ["--device", "cpu", "--rounds", "1", "--ideas", "1", "--trials", "20", "--min-seconds", "0.1", "--no-compile"]


def suite(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "suite.py"), *args],
        cwd=ROOT,
        # A fixed commit name: an edit elsewhere in the checkout mid-test would add "-dirty" and defeat the reuse.
        env={**os.environ, "KFORGE_COMMIT": "test-suite"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = Path(args[args.index("--out") + 1])
    return proc, json.loads((out / "suite.json").read_text()), (out / "suite.md").read_text()


def test_suite_runs_the_builtin_team_writes_the_table_and_resumes(tmp_path: Path, kforge_cache: Path) -> None:
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(PROBLEMS / "layernorm_small.py", problems)
    (problems / "sort_small.py").write_text(SORT_SMALL)
    runs, out = tmp_path / "runs", tmp_path / "out"
    common = [str(problems), *FAST, "--runs-dir", str(runs), "--out", str(out)]

    _, record, md = suite(*common)
    rows = {r["name"]: r for r in record["rows"]}
    assert set(rows) == {"layernorm_small", "sort_small"}
    assert all(r["status"] == "done" and r["this_session"] == "new" for r in rows.values())

    ln = rows["layernorm_small"]
    assert ln["family"] == "layernorm"
    assert ln["candidates"] == ln["candidates_ok"] == 1
    assert ln["eager_ms"] > 0 and ln["compile_ms"] is None
    assert ln["search_wall_s"] > 0
    assert ln["stop_reason"] == "completed 1 rounds"
    if ln["reference_stands"]:  # a noisy CPU can leave the template behind eager
        assert ln["speedup_vs_best"] == 1.0 and ln["best_id"] is None
    else:
        assert ln["best_id"] == "c1-0" and ln["template"]
        assert ln["speedup_vs_best"] > 1.0 and ln["speedup_vs_eager"] == pytest.approx(ln["speedup_vs_best"])
        assert ln["run_checks"]["passed"] == ln["run_checks"]["checks"] == 5
        fresh = ln["fresh_check"]
        assert fresh["accepted"] and fresh["passed"] == fresh["checks"] == 5
        # The re-check's inputs are none of the run's: that is what "fresh seeds" means.
        assert not set(fresh["input_seeds"]) & set(ln["run_checks"]["seeds"])
        assert ln["verified"] is True
        assert (runs / ln["run_id"] / "best" / "model_new.py").exists()
    assert ln["pct_roofline"] > 0
    # Every candidate is kept in brief: the point without the problem's facts, its verdict and its time.
    (tried,) = ln["tried"]
    assert tried["id"] == "c1-0" and tried["template"] and tried["verdict"] == "accepted"
    assert tried["ms"] > 0 and "spec" not in tried["params"] and "eps" not in tried["params"]

    sort = rows["sort_small"]
    assert sort["family"] == "no builtin idea applies"
    assert sort["stop_reason"] == "no builtin idea applies to this problem"
    assert sort["reference_stands"] and sort["verified"] is True
    assert sort["candidates"] == 0 and sort["fresh_check"] is None
    assert sort["speedup_vs_best"] == sort["speedup_vs_eager"] == 1.0 and sort["speedup_vs_compile"] is None

    s = record["summary"]
    assert (s["problems"], s["done"], s["recognised"]) == (2, 2, 1)
    assert s["geomean_vs_best"] == pytest.approx(math.sqrt(ln["speedup_vs_best"] * 1.0))
    assert s["correctness_rate"] == 1.0
    assert record["command"].startswith("python3 bench/suite.py ") and "--rounds 1" in record["command"]

    # The markdown: RESULTS.md's header facts, one table row per problem, and the summary.
    assert f"— {record['date']}, " in md and f"Commit: `{record['commit']}`" in md and record["command"] in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 3 and all(line.count("|") == 15 for line in table)
    assert any(line.startswith("| sort_small |") and "reference stands" in line for line in table)
    assert f"**{s['geomean_vs_best']:.3f}× vs the faster of eager and torch.compile**" in md
    line = f"- layernorm_small: c1-0 `{tried['template']}`"
    assert line in md and md.count("\n- sort_small:") == 0  # no candidates, no line
    assert f"{tried['ms']:.4f} ms, {tried['speedup_vs_best']:.3f}×" in md.split(line)[1].splitlines()[0]

    # Again, same settings, with the time budget already spent and one more problem: both finished runs
    # are read back (nothing is searched again), and the new problem waits for the next call.
    before = sorted(p.name for p in runs.iterdir() if p.is_dir())
    proc, again, md = suite(*common, str(PROBLEMS / "softmax_small.py"), "--budget-s", "0")
    assert [(r["name"], r["status"], r.get("this_session")) for r in again["rows"]] == [
        ("layernorm_small", "done", "reused"),
        ("sort_small", "done", "reused"),
        ("softmax_small", "pending", None),
    ]
    assert "baseline:" not in proc.stdout and "1 problem(s) left" in proc.stdout  # no search step ran
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == before
    assert {r["name"]: r.get("speedup_vs_best") for r in again["rows"][:2]} == {
        n: r["speedup_vs_best"] for n, r in rows.items()
    }
    assert again["summary"]["done"] == 2 and "| softmax_small | 1 MiB | softmax | pending: not run yet |" in md

    # Other settings are another experiment: a new run, and --only keeps just the named problem.
    _, other, _ = suite(*common[:-4], "--rounds", "2", "--only", "sort", "--runs-dir", str(runs), "--out", str(out))
    assert [(r["name"], r["this_session"]) for r in other["rows"]] == [("sort_small", "new")]
    assert len([p for p in runs.iterdir() if p.is_dir()]) == len(before) + 1


def _load_script() -> ModuleType:
    # bench/ holds scripts, not a package: load the script as a module.
    spec = importlib.util.spec_from_file_location("bench_suite", ROOT / "bench" / "suite.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_geometric_means_count_a_standing_reference_as_one() -> None:
    bench_suite = _load_script()

    kernel = {
        "status": "done",
        "reference_stands": False,
        "verdict": "accepted",
        "run_checks": {"passed": 5, "checks": 5},
        "fresh_check": {"accepted": True, "passed": 5, "checks": 5},
        "speedup_vs_eager": 8.0,
        "speedup_vs_compile": 4.0,
        "speedup_vs_best": 4.0,
        "family": "softmax",
    }
    reference = {
        "status": "done",
        "reference_stands": True,
        "speedup_vs_eager": 1.0,
        "speedup_vs_compile": 1.0,
        "speedup_vs_best": 1.0,
        "family": "no builtin idea applies",
    }
    wrong = {**kernel, "fresh_check": {"accepted": False, "passed": 3, "checks": 5}, "speedup_vs_best": 9.0}
    pending = {"name": "later", "status": "pending"}
    for row in (kernel, reference, wrong):
        row["verified"] = bench_suite.verified(row)
    assert (kernel["verified"], reference["verified"], wrong["verified"]) == (True, True, False)
    assert bench_suite.verified({**kernel, "fresh_check": None}) is None  # not re-checked yet

    s = bench_suite.summarise([kernel, reference, pending])
    assert (s["problems"], s["done"], s["recognised"], s["kernels_selected"]) == (3, 2, 1, 1)
    assert s["geomean_vs_best"] == pytest.approx(2.0)
    assert s["geomean_vs_eager"] == pytest.approx(math.sqrt(8.0))
    assert s["geomean_vs_compile"] == pytest.approx(2.0)
    s = bench_suite.summarise([kernel, wrong])
    assert s["correctness_rate"] == 0.5 and s["kernels_verified_fresh"] == 1
    assert s["geomean_vs_best"] == pytest.approx(2.0)  # the wrong kernel's 9.0 counts as 1.0


def _done_row(name: str) -> dict[str, Any]:
    """A finished row whose reference stands."""
    done = {"status": "done", "reference_stands": True, "verified": True, "family": "softmax", "input_bytes": 2**20}
    done |= {"eager_ms": 1.0, "compile_ms": None, "pct_roofline": None, "candidates": 0, "candidates_accepted": 0}
    done |= {"speedup_vs_best": 1.0, "speedup_vs_eager": 1.0, "speedup_vs_compile": None, "search_wall_s": 1.0}
    return done | {"stop_reason": "completed 1 rounds", "name": name}


def test_a_kernel_below_the_problem_s_precision_is_marked_and_said_under_the_table() -> None:
    bench_suite = _load_script()
    reduced = [
        "precision_downgrade at line 115: C/CUDA source computes in bfloat16 ('.bf16x2')",
        "precision_downgrade at line 344: uses torch.bfloat16, below the problem's precision",
        "precision_downgrade at line 360: C/CUDA source computes in bfloat16 ('.bf16x2')",
    ]
    kernel = _done_row("matmul") | {"reference_stands": False, "best_id": "c1-0", "template": "matmul_cuda_bf16x3"}
    kernel |= {"run_checks": {"passed": 5, "checks": 5}, "fresh_check": {"accepted": True, "passed": 5, "checks": 5}}
    rows = [kernel | {"reduced_precision": reduced}, _done_row("relu"), kernel | {"name": "mm_fp32"}]
    record = {"date": "2026-12-04", "commit": "abc1234", "device": "cuda", "command": "python3 bench/suite.py"}
    md = bench_suite.markdown(record | {"rows": rows, "summary": bench_suite.summarise(rows)})
    table = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    assert "c1-0 `matmul_cuda_bf16x3` †" in table["matmul"] and "†" not in table["mm_fp32"] + table["relu"]
    (note,) = [line for line in md.splitlines() if line.startswith("- †")]
    assert note.endswith(
        "relaxed policy allows within its tolerance: matmul (C/CUDA source computes in bfloat16 ('.bf16x2'); "
        "uses torch.bfloat16, below the problem's precision)."
    )


def test_each_candidate_is_kept_in_brief_and_listed_under_the_table() -> None:
    bench_suite = _load_script()
    spec = json.dumps({"heavy": {"op": "conv"}})
    candidates = [
        {"id": "c1-0", "template": "epilogue_cuda_half", "status": "ok", "verdict": "accepted"}
        | {"params": {"spec": spec, "layout": "nhwc", "block": 256}, "timing": {"candidate": 1.25}}
        | {"speedup_vs_best": 0.652},
        {"id": "c1-1", "template": "epilogue_cuda_half", "status": "ok", "verdict": "rejected"}
        | {"params": {"spec": spec, "items": 4}, "timing": {"candidate": 0.5}, "speedup_vs_best": 1.63},
        {"id": "c2-0", "template": None, "status": "compile_error", "verdict": None, "params": None},
    ]
    kept = [tried(c) for c in candidates]
    # Only the parameters a point moved from the template's defaults; the problem's facts (spec) left out.
    assert [c["params"] for c in kept] == [{"layout": "nhwc"}, {"items": 4}, {}]
    assert [c["ms"] for c in kept] == [1.25, 0.5, None]
    rows = [_done_row("conv") | {"tried": kept}, _done_row("relu") | {"tried": []}, _done_row("old")]
    record = {"date": "2026-12-05", "commit": "abc1234", "device": "cuda", "command": "python3 bench/suite.py"}
    md = bench_suite.markdown(record | {"rows": rows, "summary": bench_suite.summarise(rows)})
    listed = [line for line in md.splitlines() if line.startswith("- conv: ")]
    assert listed == [
        "- conv: c1-0 `epilogue_cuda_half` layout=nhwc: 1.2500 ms, 0.652×; "
        "c1-1 `epilogue_cuda_half` items=4: rejected; c2-0 a written kernel: compile_error"
    ]
    assert "- relu:" not in md and "- old:" not in md  # no candidates, or a row recorded before they were kept


def test_slices_run_apart_merge_into_one_table(tmp_path: Path) -> None:
    bench_suite = _load_script()
    done = _done_row("a")
    base = {"date": "2026-12-01", "commit": "abc1234", "device": "cuda", "settings": {}}
    slices = [
        {
            **base,
            "command": "python3 bench/suite.py --only a",
            "rows": [done, {"name": "b", "status": "pending"}],
        },
        {**base, "date": "2026-12-02", "command": "python3 bench/suite.py --only b", "rows": [{**done, "name": "b"}]},
    ]
    files = []
    for i, record in enumerate(slices):
        files.append(tmp_path / f"s{i}.json")
        files[-1].write_text(json.dumps(record))
    merged = bench_suite.merge(files, tmp_path / "out")
    assert [(r["name"], r["status"]) for r in merged["rows"]] == [("a", "done"), ("b", "done")]
    assert merged["summary"]["done"] == 2 and merged["date"] == "2026-12-02"
    assert merged["command"].splitlines() == [s["command"] for s in slices]
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["summary"]["done"] == 2
    files[1].write_text(json.dumps({**slices[1], "commit": "other"}))
    with pytest.raises(SystemExit, match="differ in commit"):
        bench_suite.merge(files, tmp_path / "out")
