"""bench/batch_scaling.py, for real on the CPU: two batch settings, their throughput, and whether they agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import PROBLEMS, ROOT

SCRIPT = ROOT / "bench" / "batch_scaling.py"
COMMON = "--device cpu --rounds 1 --ideas 1 --no-compile --min-seconds 0.1 --trials 20"


def scaling(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )


def test_two_settings_side_by_side(tmp_path: Path) -> None:
    problems = [str(PROBLEMS / "softmax_small.py"), str(PROBLEMS / "sum_dim_small.py")]
    out = scaling(
        tmp_path, *problems, "--out", "scal", "--config", "serial=--parallel 1", "--config", "two=--parallel 2",
        "--common", COMMON,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    record = json.loads((tmp_path / "scal" / "scaling.json").read_text())
    serial, two = record["results"]
    assert (serial["name"], two["name"], serial["exit"], two["exit"]) == ("serial", "two", 0, 0)
    # Each problem: a baseline job, a check and a timing of its one candidate, at least.
    assert serial["jobs"] >= 6 and two["jobs"] >= 6
    assert set(serial["picked"]) == set(two["picked"]) == {"softmax_small", "sum_dim_small"}
    table = (tmp_path / "scal" / "scaling.md").read_text()
    assert out.stdout.endswith(table)  # printed after the batches' own progress lines
    assert "| serial | `--parallel 1` | 0 |" in table and "| two | `--parallel 2` | 0 |" in table
    pick = lambda r, p: (r["picked"][p]["kernel"], r["picked"][p]["verdict"])  # noqa: E731
    same = sum(pick(serial, p) == pick(two, p) for p in serial["picked"])
    assert f"Same kernel and verdict in every configuration: {same} of 2 problems." in table
    for picked in serial["picked"].values():
        assert picked["kernel"] == "reference" or picked["kernel"].split()[0] in ("softmax_cpu", "reduce_cpu")
        assert picked["kernel"] == "reference" or '"spec"' not in picked["kernel"]  # the problem's facts are left out
        assert f"{picked['kernel']} · {picked['verdict']} · " in table


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    out = scaling(tmp_path, "nothing.py", "--out", "scal", "--config", "no-equals-sign")
    assert out.returncode == 2 and "--config 'no-equals-sign': give NAME=ARGS" in out.stderr
    out = scaling(tmp_path, "nothing.py", "--out", "scal", "--config", "a=--parallel 1")
    assert out.returncode == 1 and out.stderr.strip().endswith(
        "batch_scaling: configuration a: kforge batch refused its options or problems"
    )
