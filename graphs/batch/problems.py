"""Which problem files a batch runs, what each row is called, and why a problem cannot run here.

A KernelBench checkout is loaded unmodified, so some of its files fail on a given machine for reasons
that are facts about the machine, not bugs in the file: level 4 imports ``transformers``, some files
call ``.cuda()``. Those get a short reason that says what is missing instead of a traceback.
"""

from __future__ import annotations

import fnmatch
import glob
import re
from collections import Counter
from pathlib import Path

from tools.errors import ConfigError, KernelforgeError
from tools.problem import one_line

REASON_CHARS = 300  # a reason is one table cell
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
# On a machine or device without CUDA, any of these in an error means the problem wants a GPU.
_NEEDS_CUDA = re.compile(r"not compiled with CUDA|NVIDIA driver|CUDA GPUs? (are|is) available|\bcuda\b", re.IGNORECASE)


def _folder(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))


def discover(specs: list[str], only: list[str]) -> list[Path]:
    """Problem files named by ``specs`` (files, folders, globs that match files or folders), kept when
    a pattern or substring of ``only`` matches the file's stem. A file named twice runs once."""
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found += _folder(path)
        elif path.is_file():
            found.append(path)
        else:
            matches = [Path(m) for m in sorted(glob.glob(spec, recursive=True))]
            files = [p for m in matches for p in (_folder(m) if m.is_dir() else [m] if m.suffix == ".py" else [])]
            if not files:
                raise ConfigError(f"{spec}: no such problem file, folder or glob match")
            found += files
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if only:
        unique = [p for p in unique if any(fnmatch.fnmatch(p.stem, o) or o in p.stem for o in only)]
    return unique


def row_names(paths: list[Path]) -> dict[Path, str]:
    """A row's name is the file's stem, or ``folder/stem`` where two folders hold the same stem."""
    counts = Counter(p.stem for p in paths)
    return {p: p.stem if counts[p.stem] == 1 else f"{p.parent.name}/{p.stem}" for p in paths}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def explain(text: str, device: str) -> str:
    """A one-line reason from an error message: what is missing when that is what it says."""
    line = (text.strip().splitlines() or [""])[0]
    missing = _MISSING_MODULE.search(text)
    if missing:
        return f"needs the `{missing.group(1).split('.')[0]}` package"
    if device != "cuda" and _NEEDS_CUDA.search(text):
        return f"needs a CUDA GPU ({line[:REASON_CHARS]})"
    return line[:REASON_CHARS]


def reason_for(exc: BaseException, device: str, path: Path | None = None) -> str:
    """The one-line reason for an exception; the file's own path is dropped (the row names it)."""
    for link in _chain(exc):
        if isinstance(link, ModuleNotFoundError) and link.name:
            return f"needs the `{link.name.split('.')[0]}` package"
    # Our own errors are written to be read as they are; anything else needs its type to make sense.
    text = (str(exc).strip().splitlines() or [""])[0] if isinstance(exc, KernelforgeError) else one_line(exc)
    if path is not None:
        text = text.replace(f"{path}: ", "", 1)
    return explain(text, device)
