"""Shared fixtures. Every test session uses its own compile/ceilings cache, never the user's."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
CANDIDATES = PROBLEMS / "candidates"
FIXTURES = ROOT / "tests" / "fixtures"
# KernelBench's development split, unmodified (beside the checkout; $KERNELBENCH_DIR names another copy). Tests that
# read it skip where it is absent.
KERNELBENCH = Path(os.environ.get("KERNELBENCH_DIR") or ROOT.parent / "shared" / "kernelbench")


@pytest.fixture(scope="session", autouse=True)
def kforge_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide cache dir (compiled kernels, ceilings), shared with worker subprocesses."""
    path = tmp_path_factory.mktemp("kforge-cache")
    os.environ["KFORGE_CACHE_DIR"] = str(path)
    # The torch.compile reference is slow to build on a CPU; share inductor's cache across workers.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    return path


@pytest.fixture(autouse=True)
def no_held_api_keys() -> Iterable[None]:
    """Every test starts and ends with no API key held in memory (tools.keys): a key one test took out of
    the environment would otherwise serve another that expects none."""
    from tools import keys

    keys.forget()
    yield
    keys.forget()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist (`make test` runs two workers) every test that starts a Ray cluster goes to one
    # worker: two clusters at once on a small machine would miss Ray's start-up windows. GPU tests go to
    # one worker too: each worker has its own cache folder, so its device turns do not see the other's.
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("sandbox") == "ray":
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif "gpu" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("gpu"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def bound_names(target: ast.expr) -> list[ast.Name]:
    """The names an assignment target binds (``a``, ``a, (b, *c)``; not ``a.attr`` or ``a[k]``)."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in bound_names(e)]
    return []


def module_level_redefinitions(source: str) -> list[str]:
    """Names a source binds more than once at module level (def, class, assignment, import): a template's own
    helper that reuses a name of the shared launch snippets would silently replace it."""
    seen: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in bound_names(t)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        else:
            continue
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    return sorted(name for name, count in seen.items() if count > 1)


def assert_python_is_sound(sources: list[str]) -> None:
    """Every source parses, names nothing undefined (ruff's F821/F822/E9) and binds no module-level name twice:
    a wrapper's Python is checked here, on a machine with no GPU to import it on."""
    for k, src in enumerate(sources):
        assert module_level_redefinitions(src) == [], f"rendering {k} binds these names twice"
    with tempfile.TemporaryDirectory() as tmp:
        for k, src in enumerate(sources):
            Path(tmp, f"rendering_{k}.py").write_text(src)
        checked = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F821,F822,E9", tmp],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-1000:]


def assert_cuda_renderings_compile(renderings: Iterable[tuple[str, dict, str]]) -> None:
    """NVRTC-compile each (template, params, source) for sm_90a, on every core at once (NVRTC releases
    the GIL); fail on the first rendering with no kernel literal or a compile error."""
    from tools.compile import check_candidate_cuda

    renderings = list(renderings)
    for template, params, src in renderings:
        assert "class ModelNew(nn.Module)" in src, f"{template} {params}"
    assert_python_is_sound([src for _, _, src in renderings])
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        all_reports = list(pool.map(lambda r: check_candidate_cuda(r[2], arch="sm_90a"), renderings))
    for (template, params, _), reports in zip(renderings, all_reports, strict=True):
        assert reports, f"{template} {params}: no kernel literal found"
        assert all(r.ok for r in reports), f"{template} {params}:\n{reports[0].log}"
