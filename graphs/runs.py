"""Run folders: ``runs/<run_id>/`` with run.json, the SQLite checkpoint, events.jsonl and candidates/."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import secrets
import sqlite3
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.sqlite import SqliteSaver

from graphs.config import RunConfig
from tools.errors import ConfigError

if TYPE_CHECKING:  # importing torch would cost `kforge runs` and `trace` seconds they do not need
    from tools.problem import Problem

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def runs_root(override: str | None = None) -> Path:
    return Path(override or os.environ.get("KFORGE_RUNS_DIR") or "runs")


@dataclass(frozen=True)
class RunPaths:
    dir: Path

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def run_json(self) -> Path:
        return self.dir / "run.json"

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint.sqlite"

    @property
    def events(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def candidates(self) -> Path:
        return self.dir / "candidates"

    @property
    def best(self) -> Path:
        return self.dir / "best"

    @property
    def report(self) -> Path:
        return self.dir / "report.md"


def _git_commit() -> str | None:
    """The checkout's commit, with "-dirty" when its files differ from it (then it names no exact tree).

    $KFORGE_COMMIT, when set, names the tree instead: a copy shipped to a GPU machine may carry no .git, or
    another commit's .git with this tree's changes on top.
    """
    if named := os.environ.get("KFORGE_COMMIT"):
        return named
    proc = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    commit = proc.stdout.strip()
    if not commit:
        return None
    status = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return commit + ("-dirty" if status.stdout.strip() else "")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "langgraph", "kernelforge"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # run from a source checkout (PYTHONPATH) without pip install
            out[pkg] = "not installed (source tree)"
    return out


def create_run(config: RunConfig, problem: Problem, root: Path) -> RunPaths:
    from tools.device import gpu_summary

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = RunPaths(root / f"{stamp}-{problem.name}-{secrets.token_hex(2)}")
    paths.candidates.mkdir(parents=True)
    meta = {
        "run_id": paths.run_id,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": json.loads(config.model_dump_json()),
        "problem": {"name": problem.name, "path": str(problem.path), "sha256": problem.info.sha256},
        "versions": _versions(),
        "commit": _git_commit(),
        "host": platform.node(),
        "gpus": gpu_summary(),  # name, driver and memory of each visible GPU (nvidia-smi), for the report
    }
    paths.run_json.write_text(json.dumps(meta, indent=2))
    return paths


def record_failure(paths: RunPaths, error: BaseException) -> None:
    """Keep in run.json why the run stopped on an error (its first line), for ``kforge runs``; the next attempt
    (``kforge resume``) that gets further clears it."""
    meta = json.loads(paths.run_json.read_text())
    meta["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    paths.run_json.write_text(json.dumps(meta, indent=2))


def clear_failure(paths: RunPaths) -> None:
    meta = json.loads(paths.run_json.read_text())
    if meta.pop("error", None) is not None:
        paths.run_json.write_text(json.dumps(meta, indent=2))


def stop_text(meta: dict[str, Any], state: dict[str, Any]) -> str:
    """How a run stopped: its stop reason, the error it failed on, or where it got to."""
    if state.get("stop_reason"):
        return str(state["stop_reason"])
    if meta.get("error"):
        return f"failed: {meta['error']}"
    return "unfinished" if state else "not started"


def open_run(ref: str, root: Path) -> tuple[RunPaths, RunConfig, dict[str, Any]]:
    """A run by id (under root) or by path."""
    candidates = [Path(ref), root / ref]
    folder = next((p for p in candidates if (p / "run.json").exists()), None)
    if folder is None:
        raise ConfigError(f"{ref}: no such run (looked in {root})")
    paths = RunPaths(folder)
    meta = json.loads(paths.run_json.read_text())
    return paths, RunConfig.model_validate(meta["config"]), meta


def checkpointer(paths: RunPaths) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(str(paths.checkpoint), check_same_thread=False))


def thread_config(paths: RunPaths, recursion_limit: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": paths.run_id}, "recursion_limit": recursion_limit}


def load_state(paths: RunPaths) -> dict[str, Any]:
    """The run's latest saved state (empty when nothing was checkpointed yet)."""
    if not paths.checkpoint.exists():
        return {}
    saver = checkpointer(paths)
    snapshot = saver.get_tuple({"configurable": {"thread_id": paths.run_id}})
    return dict(snapshot.checkpoint["channel_values"]) if snapshot else {}


def list_runs(root: Path) -> list[dict[str, Any]]:
    rows = []
    for run_json in sorted(root.glob("*/run.json")):
        paths = RunPaths(run_json.parent)
        meta = json.loads(run_json.read_text())
        state = load_state(paths)
        best = next((c for c in state.get("candidates", []) if c["id"] == state.get("best_id")), None)
        rows.append(
            {
                "run_id": paths.run_id,
                "problem": meta["problem"]["name"],
                "model": meta["config"]["model"],
                "device": meta["config"]["device"],
                "rounds": state.get("round", 0),
                "candidates": len(state.get("candidates", [])),
                "best": best["id"] if best else None,
                "speedup": best.get("speedup_vs_best") if best else None,
                "stop": stop_text(meta, state),
            }
        )
    return rows
