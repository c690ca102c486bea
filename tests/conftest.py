"""Shared fixtures. Every test session uses its own compile/ceilings cache, never the user's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
CANDIDATES = PROBLEMS / "candidates"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session", autouse=True)
def kforge_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide cache dir (compiled kernels, ceilings), shared with worker subprocesses."""
    path = tmp_path_factory.mktemp("kforge-cache")
    os.environ["KFORGE_CACHE_DIR"] = str(path)
    # The torch.compile reference is slow to build on a CPU; share inductor's cache across workers.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
