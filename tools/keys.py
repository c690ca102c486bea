"""Provider API keys: taken out of the environment once, then held only in this process's memory.

A candidate on the local backend runs as the same user as kforge, so anything kforge keeps in its
environment is readable to it: through an inherited environment, and through ``/proc/<pid>/environ``
of kforge itself, which shows the environment block the process was *started* with, whatever
``os.environ`` says later. So ``take_from_environment`` moves every provider key into a store here,
deletes it from ``os.environ`` (and the C environment: no child process inherits it) and zeroes it in
the exec-time block, so that ``/proc/<pid>/environ`` no longer shows it. The model client gets its key
from ``api_key``. Other processes are out of its reach: a shell that exported the key still holds it.

Keys held here are also what ``redact`` replaces with ``[redacted]`` in logs, verdicts and reports.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel

log = structlog.get_logger(__name__)

# Every variable that may hold a provider's key, whether or not kforge has a client for that provider:
# the point is that none of them stays where a candidate can read it.
KEY_VARS = ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY")
REDACTED = "[redacted]"
# Shorter values are not replaced in text: no real provider key is that short, and a placeholder such as
# OPENAI_API_KEY=x for a local server would otherwise turn every "x" of a log into "[redacted]".
MIN_REDACTED_LEN = 8

M = TypeVar("M", bound=BaseModel)

_held: dict[str, str] = {}
_lock = threading.Lock()


def _exec_environment_block() -> tuple[int, int] | None:
    """(start, end) addresses of this process's exec-time environment strings, or None if unknown.

    ``/proc/self/stat`` fields 50 and 51 (env_start, env_end; Linux 3.5 and later), counted from the
    fields after the command name, which may itself hold spaces and parentheses.
    """
    try:
        text = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
    if len(fields) < 49:
        return None
    start, end = int(fields[47]), int(fields[48])
    return (start, end) if 0 < start < end else None


def _scrub_exec_environment(names: tuple[str, ...]) -> bool:
    """Zero the ``NAME=value`` strings of ``names`` in the exec-time environment block.

    Safe only once the variables are unset: then nothing (libc's ``environ`` included) points at them.
    False when the block cannot be found (no /proc): ``/proc/<pid>/environ`` then still shows them.
    """
    block = _exec_environment_block()
    if block is None:
        return False
    start, end = block
    prefixes = tuple(f"{name}=".encode() for name in names)
    offset = 0
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        if entry.startswith(prefixes):
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1
    return True


def take_from_environment() -> dict[str, str]:
    """Move every provider key out of the environment into this process's store; return the store.

    Idempotent: a second call finds nothing left to move and keeps what the first took, so a second
    run in the same process (a test, LangGraph Studio) still gets its key. A key set again in the
    environment later replaces the held one.
    """
    with _lock:
        taken = []
        for name in KEY_VARS:
            value = os.environ.pop(name, None)
            os.unsetenv(name)  # in case the C environment differs from os.environ
            if value is not None:
                taken.append(name)
                if value.strip():
                    _held[name] = value.strip()
        if taken and not _scrub_exec_environment(tuple(taken)):
            log.warning("api_keys_still_in_proc_environ", keys=taken, why="no /proc/self/stat environment block")
        return dict(_held)


def get(name: str) -> str | None:
    """The held key of ``name`` (taking the environment's keys first), or None."""
    return take_from_environment().get(name)


def held() -> dict[str, str]:
    """Every key held here: for a process of this one's that starts without them (a batch's problem)."""
    with _lock:
        return dict(_held)


def adopt(keys: Mapping[str, str]) -> None:
    """Hold ``keys`` (from ``held()`` in the process that started this one), after taking this
    process's own environment's."""
    take_from_environment()
    with _lock:
        _held.update({k: v for k, v in keys.items() if k in KEY_VARS and v})


def forget() -> None:
    """Drop every held key (tests start from an empty store)."""
    with _lock:
        _held.clear()


def _secrets() -> list[str]:
    with _lock:
        # Longest first: a key that contains another is replaced whole.
        return sorted({v for v in _held.values() if len(v) >= MIN_REDACTED_LEN}, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every held key replaced by ``[redacted]``."""
    for secret in _secrets():
        text = text.replace(secret, REDACTED)
    return text


def redact_data(value: Any) -> Any:
    """``value`` with ``redact`` applied to every string in it (dicts, lists and tuples walked)."""
    secrets = _secrets()
    if not secrets:
        return value

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            for secret in secrets:
                if secret in v:
                    v = v.replace(secret, REDACTED)
            return v
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        return v

    return walk(value)


def redact_model(model: M) -> M:
    """A pydantic model (a job's verdict) with every held key replaced; the model itself when none is held.

    The sandbox backends return verdicts through this: whatever a candidate printed or raised is in them,
    and from there it reaches the checkpoint, the run's files, the report and the next prompt.
    """
    if not _secrets():
        return model
    return type(model).model_validate(redact_data(model.model_dump(mode="json")))
