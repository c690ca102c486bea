"""Which problem files a batch runs, what each row is called, and why a problem cannot run here.

A KernelBench checkout is loaded unmodified, so some of its files fail on a given machine for reasons
that are facts about the machine, not bugs in the file: level 4 imports ``transformers`` and downloads a
Hugging Face model's config when it is imported, some files call ``.cuda()``. Those get a short reason
that says what is missing instead of a traceback.
"""

from __future__ import annotations

import fnmatch
import glob
import re
import sys
from collections import Counter
from pathlib import Path

from tools.errors import ConfigError, KernelforgeError
from tools.problem import one_line

REASON_CHARS = 300  # a reason is one table cell
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
# On a machine or device without CUDA, any of these in an error means the problem wants a GPU.
_NEEDS_CUDA = re.compile(r"not compiled with CUDA|NVIDIA driver|CUDA GPUs? (are|is) available|\bcuda\b", re.IGNORECASE)
_HUB = ("huggingface_hub", "transformers")
# The arguments that name the model in the Hugging Face functions a download fails in (huggingface_hub's
# hf_hub_download, transformers' cached_file and from_pretrained), innermost first.
_MODEL_ARGUMENTS = ("repo_id", "path_or_repo_id", "pretrained_model_name_or_path")
# Exception classes (any in the MRO) that mean the host could not be reached: builtins', httpx's, requests'.
_NETWORK = {"ConnectionError", "TimeoutError", "gaierror", "NetworkError", "ConnectError", "TimeoutException"}


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


def _package(obj: object) -> str:
    return (getattr(obj, "__module__", None) or "").split(".")[0]


def _hub_model(chain: list[BaseException]) -> str | None:
    """The model a failed Hugging Face download was for. No message in the chain names it, so it is read from
    the arguments of the library frames the exceptions passed through."""
    for link in reversed(chain):
        frames = []
        tb = link.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            if frame.f_globals.get("__name__", "").split(".")[0] in _HUB:
                for key in _MODEL_ARGUMENTS:
                    if isinstance(value := frame.f_locals.get(key), str):
                        return value
    return None


def _hub_download(chain: list[BaseException]) -> str | None:
    """The reason for a Hugging Face download that failed, or None when the chain holds none (a level 4 file
    builds its model's config when it is imported, so loading it fetches files from the Hub)."""
    hub = [link for link in chain if _package(type(link)) == "huggingface_hub"]
    if not hub:
        return None
    model = _hub_model(chain)
    needs = f"needs the Hugging Face model `{model}`" if model else "needs a Hugging Face model"
    if any(_NETWORK & {c.__name__ for c in type(link).__mro__} for link in chain):
        return f"{needs} (download failed: no network)"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and getattr(constants, "HF_HUB_OFFLINE", False):
        return f"{needs} (not in the local cache, and HF_HUB_OFFLINE forbids the download)"
    return f"{needs} (download failed: {one_line(hub[-1])})"


def reason_for(exc: BaseException, device: str, path: Path | None = None) -> str:
    """The one-line reason for an exception; the file's own path is dropped (the row names it)."""
    chain = _chain(exc)
    for link in chain:
        if isinstance(link, ModuleNotFoundError) and link.name:
            return f"needs the `{link.name.split('.')[0]}` package"
    hub = _hub_download(chain)
    if hub is not None:
        return hub[:REASON_CHARS]
    # Our own errors are written to be read as they are; anything else needs its type to make sense.
    text = (str(exc).strip().splitlines() or [""])[0] if isinstance(exc, KernelforgeError) else one_line(exc)
    if path is not None:
        text = text.replace(f"{path}: ", "", 1)
    return explain(text, device)
