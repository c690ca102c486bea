"""Where kernelforge keeps its caches: one folder, overridable with ``KFORGE_CACHE_DIR``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import platformdirs


def cache_dir(*parts: str) -> Path:
    """Return (and create) a folder under the user cache dir."""
    root = Path(os.environ.get("KFORGE_CACHE_DIR") or platformdirs.user_cache_dir("kernelforge"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def writable_cache_dir(*parts: str) -> Path:
    """``cache_dir(*parts)`` where this process may write there; else a folder of its own under ``$TMPDIR``.

    A contained candidate's job (``sandbox.contain``) sees the shared cache read-only, or not at all: it compiles
    without it rather than plant what later jobs would load.
    """
    try:
        folder = cache_dir(*parts)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:  # unreadable or read-only: the private folder below
        pass
    folder = Path(tempfile.gettempdir(), "kforge-cache", *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def unique_suffix() -> str:
    """A name part no concurrent process shares: a pid alone repeats (every contained job is process 1 of its own
    PID namespace, sandbox.contain)."""
    return f"{os.getpid()}-{secrets.token_hex(6)}"


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so that concurrent jobs never read half a file."""
    tmp = path.with_name(f".{path.name}.{unique_suffix()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def open_flock(path: Path, mode: int = fcntl.LOCK_EX, blocking: bool = True) -> IO[str] | None:
    """``path``'s advisory lock (the file created if need be) in ``mode``, held until the handle is closed.

    None when ``blocking`` is False and the lock is not free at once. The kernel releases it when the
    holder dies, so a killed process never leaves a lock behind.
    """
    handle: IO[str] = path.open("a")
    try:
        fcntl.flock(handle, mode | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.close()
        return None
    except BaseException:
        handle.close()
        raise
    return handle


@contextlib.contextmanager
def flocked(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold ``path``'s exclusive lock for the block; yields False (holding nothing) if not free at once."""
    handle = open_flock(path, blocking=blocking)
    try:
        yield handle is not None
    finally:
        if handle is not None:
            handle.close()
