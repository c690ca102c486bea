"""KernelBench's levels in `kforge batch`: one summary per folder, the finished rows of an earlier machine call
taken by a later one (--after), and what a level 3 or 4 file needs that a bare machine may lack.

The whole --after workflow (two slices on two "machines", then --merge) runs for real, searches included, in
tests/test_batch.py's long test; here are its rules, on hand-made earlier records and no search."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphs.batch import BatchSettings, merge, run_batch, summarise
from graphs.batch.metrics import by_group
from graphs.batch.rows import NO_GROUP, group_of
from graphs.config import RunConfig
from tests.conftest import KERNELBENCH, PROBLEMS, ROOT
from tests.test_batch import kernel_row, reference_row
from tools.errors import ConfigError
from tools.problem import load_problem

COMMIT = "test-batch-levels"


def table_row(name: str, row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A finished row with what the markdown table prints."""
    cells = {"name": name, "outcome": "faster", "eager_ms": 1.0, "compile_ms": None, "best_id": "c1-0"}
    cells |= {"template": "t", "kernel_id": "c1-0", "candidates": 1, "search_wall_s": 10.0}
    return cells | row | extra


def write_slice(path: Path, rows: list[dict[str, Any]], **extra: Any) -> Path:
    base = {"date": "2026-12-01", "commit": "abc", "device": "cpu", "model": "builtin", "wall_s": 1.0}
    path.write_text(json.dumps({**base, "command": f"kforge batch # {path.stem}", "rows": rows, **extra}))
    return path


def test_each_folder_gets_its_own_summary_and_the_table_shows_them_side_by_side(tmp_path: Path) -> None:
    # Rows of batch.json files written before rows named their group: it comes from the path, else "—".
    level1 = [
        table_row("a", kernel_row(3.0, 2.0), path="kb/level1/a.py"),
        table_row("b", reference_row(), path="kb/level1/b.py", outcome="no correct kernel", search_wall_s=5.0),
    ]
    level10 = [table_row("c", kernel_row(1.6, 1.6), path="/abs/level10/c.py")]
    level2 = [{"name": "d", "path": "kb/level2/d.py", "status": "skipped", "reason": "needs the `einops` package"}]
    old = [{"name": "e", "status": "error", "reason": "RuntimeError: boom"}, {"name": "f", "status": "pending"}]
    assert [group_of(r) for r in [*level1, *level2, *old]] == ["level1", "level1", "level2", NO_GROUP, NO_GROUP]
    assert group_of({"group": "level3", "path": "kb/level1/x.py"}) == "level3"  # the row's own field first

    files = [write_slice(tmp_path / "1.json", level1 + level10), write_slice(tmp_path / "2.json", level2 + old)]
    merged = merge(files, tmp_path / "out", "batch")
    groups = merged["groups"]
    assert list(groups) == ["level1", "level2", "level10", NO_GROUP]  # natural order: level2 before level10
    assert groups == by_group(merged["rows"]) and groups["level1"] == summarise(level1)
    one = groups["level1"]
    assert (one["attempted"], one["fast_p_vs_eager"]["1"], one["fast_p_vs_best"]["2"]) == (2, 0.5, 0.0)
    assert one["geomean_vs_best"] == pytest.approx(math.sqrt(2.0)) and one["search_wall_s"] == 15.0
    assert (groups[NO_GROUP]["problems"], groups[NO_GROUP]["attempted"]) == (2, 1)
    assert groups["level2"]["correctness_rate"] == 0.0 and groups["level2"]["geomean_vs_best"] is None

    md = (tmp_path / "out" / "batch.md").read_text()
    table = md[md.index("Per folder") :].splitlines()
    assert table[2] == f"| | level1 | level2 | level10 | {NO_GROUP} | all |"
    assert "| problems attempted | 2 of 2 | 1 of 1 | 1 of 1 | 1 of 2 | 5 of 6 |" in table
    assert "| correct kernels (fast_0) | 50% | 0% | 100% | 0% | 40% |" in table
    assert "| fast_1.5 vs eager / vs faster ref | 50% / 50% | 0% / 0% | 100% / 100% | 0% / 0% | 40% / 40% |" in table
    assert f"| geomean vs faster ref | 1.414× | — | 1.600× | — | {3.2 ** (1 / 5):.3f}× |" in table
    assert "| search wall time | 15 s | 0 s | 10 s | 0 s | 25 s |" in table
    assert all(line.count("|") == 7 for line in table[2:] if line.startswith("|"))

    # One folder: its summary is the batch's; batch.json still has it, batch.md no second table.
    single = merge([write_slice(tmp_path / "3.json", level1)], tmp_path / "one", "batch")
    assert list(single["groups"]) == ["level1"] and single["groups"]["level1"] == single["summary"]
    assert "Per folder" not in (tmp_path / "one" / "batch.md").read_text()


def earlier_record(config: RunConfig, rows: list[dict[str, Any]], commit: str = COMMIT) -> dict[str, Any]:
    return {
        "date": "2026-12-01",
        "commit": commit,
        "device": config.device,
        "model": config.model,
        "command": "kforge batch (an earlier call)",
        "run_config": json.loads(config.model_dump_json(exclude={"problem"})),
        "rows": rows,
    }


def test_a_later_call_takes_the_finished_rows_of_the_same_source_settings_and_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFORGE_COMMIT", COMMIT)
    folder = tmp_path / "level1"
    folder.mkdir()
    names = ("layernorm_small", "softmax_small", "sum_dim_small")
    for name in names:
        shutil.copy(PROBLEMS / f"{name}.py", folder)
    sha = {name: load_problem(folder / f"{name}.py").info.sha256 for name in names}
    base = RunConfig(problem="", device="cpu", rounds=1, ideas=1, n_checks=1, compile_reference=False)
    elsewhere = {"commit": COMMIT, "run_id": "on-another-machine"}
    # A kernel that passed the earlier call's checks and was never re-checked on fresh seeds.
    unchecked = kernel_row(2.0, 2.0, verdict="accepted", run_checks={"passed": 1, "checks": 1}, fresh_check=None)
    rows = [
        table_row("softmax_small", reference_row(), **elsewhere, sha256=sha["softmax_small"], path="/gone/s.py"),
        table_row("sum_dim_small", unchecked, **elsewhere, sha256=sha["sum_dim_small"]),
        # From a batch.json written before rows kept their source's hash: it cannot be matched.
        table_row("layernorm_small", reference_row(), **elsewhere),
    ]
    after = tmp_path / "earlier.json"
    after.write_text(json.dumps(earlier_record(base, rows)))

    def batch(config: RunConfig, fresh_check: bool = False) -> dict[str, dict[str, Any]]:
        settings = BatchSettings(
            runs_dir=tmp_path / "runs",
            out=tmp_path / "out",
            command="kforge batch level1 --after earlier.json",
            budget_s=0,  # search nothing: what is not taken stays pending
            fresh_check=fresh_check,
            after=(after,),
        )
        record = run_batch(sorted(folder.glob("*.py")), config, settings)
        return {r["name"]: r for r in record["rows"]}

    got = batch(base)
    assert {n: (r["status"], r.get("this_session")) for n, r in got.items()} == {
        "layernorm_small": ("pending", None),
        "softmax_small": ("done", "taken"),
        "sum_dim_small": ("done", "taken"),
    }
    taken = got["softmax_small"]
    assert taken["path"] == str(folder / "softmax_small.py") and taken["group"] == "level1"  # this machine's file
    assert taken["run_id"] == "on-another-machine" and taken["taken_from"] == str(after)
    assert not list((tmp_path / "runs").iterdir())  # nothing was searched, no run folder made
    saved = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert saved["groups"]["level1"]["done"] == 2 and saved["summary"]["pending"] == 1

    # Under --fresh-check the unchecked kernel is not verified, so its row is no longer this batch's verdict.
    assert batch(base, fresh_check=True)["sum_dim_small"]["status"] == "pending"
    # The source changed since: a new hash, so the problem is searched again.
    (folder / "softmax_small.py").write_text((PROBLEMS / "softmax_small.py").read_text() + "\n# edited\n")
    assert batch(base)["softmax_small"]["status"] == "pending"

    # Another tree or other settings: another table, so naming the file is an error, not a silent re-search.
    with pytest.raises(ConfigError, match="settings \\(rounds\\)"):
        batch(base.model_copy(update={"rounds": 2}))
    after.write_text(json.dumps(earlier_record(base, rows, commit="other")))
    with pytest.raises(ConfigError, match=f"made by commit other, this tree is {COMMIT}"):
        batch(base)
    after.write_text(json.dumps({"rows": "?"}))
    with pytest.raises(ConfigError, match=r"not a batch\.json"):
        batch(base)
    after.unlink()
    with pytest.raises(ConfigError, match="no such file"):
        batch(base)


HF_PROBLEM = '''"""Like KernelBench's level 4: importing it fetches the model's config from the Hugging Face Hub."""

import torch
from transformers import AutoConfig, AutoModelForCausalLM


class Model(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model = AutoModelForCausalLM.from_pretrained(model_name, config=config)

    def forward(self, x):
        return self.model(x).logits


model_name = "gpt2"
config = AutoConfig.from_pretrained(model_name)


def get_inputs():
    return [torch.randint(0, config.vocab_size, (1, 16))]


def get_init_inputs():
    return [model_name, config]
'''


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (pip install -e '.[kernelbench]', as `make setup` does)",
)
def test_a_file_whose_hugging_face_model_cannot_be_downloaded_gets_a_reason_that_names_the_model(
    tmp_path: Path,
) -> None:
    problem = tmp_path / "level4" / "gpt2_logits.py"
    problem.parent.mkdir()
    problem.write_text(HF_PROBLEM)
    # Offline, with an empty cache: nothing is downloaded, and a model cached on this machine does not count. In
    # a process of its own: huggingface_hub reads HF_HUB_OFFLINE once, when it is first imported. The batch's
    # row for a file that cannot be loaded is this reason (test_batch.py's long test checks that for the rest).
    env = {k: v for k, v in os.environ.items() if k not in ("HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    load = (
        "import sys; from graphs.batch.problems import reason_for; from tools.errors import ProblemError\n"
        "from tools.problem import load_problem\n"
        "try:\n    load_problem(sys.argv[1])\nexcept ProblemError as exc:\n    print(reason_for(exc, 'cpu'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", load, str(problem)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip() == (
        "needs the Hugging Face model `gpt2` (not in the local cache, and HF_HUB_OFFLINE forbids the download)"
    )
    assert not list((tmp_path / "hf").rglob("config.json"))  # nothing was fetched


@pytest.mark.skipif(not (KERNELBENCH / "level3").is_dir(), reason=f"no KernelBench split at {KERNELBENCH}")
@pytest.mark.skipif(importlib.util.find_spec("einops") is None, reason="einops is not installed ('.[kernelbench]')")
def test_level_3_s_mamba2_loads_with_einops() -> None:
    path = KERNELBENCH / "level3" / "48_Mamba2ReturnY.py"
    info = load_problem(path).info
    assert info.outputs and info.flops > 0 and "einops" in path.read_text()
