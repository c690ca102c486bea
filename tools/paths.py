"""Where kernelforge keeps its caches: one folder, overridable with ``KFORGE_CACHE_DIR``."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir(*parts: str) -> Path:
    """Return (and create) a folder under the user cache dir."""
    root = Path(os.environ.get("KFORGE_CACHE_DIR") or platformdirs.user_cache_dir("kernelforge"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so that concurrent jobs never read half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
