"""The verdict channel: one HMAC-signed frame on a pipe the worker inherits, never stdout.

The orchestrator writes a fresh random key to the worker's stdin; the worker reads it before any
candidate code exists in the process and keeps it only inside the sender's closure. A frame with a
wrong MAC, a second frame, or stray bytes on the pipe mean something other than the worker wrote
to the channel: the job is then reported as crashed, never trusted.

Limit, stated plainly: code inside the worker's interpreter could in principle dig the key out of
memory (``gc``, frames, ctypes). Candidates that reach for those are what the static anti-cheat
checks reject; the container backend adds a process boundary on top.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable

MAGIC = b"KFRG1"
KEY_BYTES = 32
CUT_SHORT = "the verdict was cut short"  # the worker died while writing: a crash, not a forgery
_HEADER = len(MAGIC) + 8 + 32


def frame(payload: bytes, key: bytes) -> bytes:
    mac = hmac.new(key, payload, hashlib.sha256).digest()
    return MAGIC + len(payload).to_bytes(8, "big") + mac + payload


def unframe(data: bytes, key: bytes) -> tuple[bytes | None, str]:
    """Return (payload, "") for exactly one valid frame, else (None, why the channel is not trusted)."""
    if not data:
        return None, "the worker sent no verdict"
    if not data.startswith(MAGIC) or len(data) < _HEADER:
        return None, "the result channel holds bytes the worker did not write"
    size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "big")
    mac = data[len(MAGIC) + 8 : _HEADER]
    payload = data[_HEADER : _HEADER + size]
    if len(payload) != size:
        return None, CUT_SHORT
    if not hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()):
        return None, "the verdict's signature is wrong (forged or tampered result channel)"
    if len(data) != _HEADER + size:
        return None, "extra bytes after the verdict on the result channel"
    return payload, ""


def make_sender(fd: int, key: bytes) -> Callable[[bytes], None]:
    """A one-shot function that signs and writes the verdict, then closes the channel."""
    os.set_inheritable(fd, False)  # subprocesses a candidate starts must not get the channel
    owner = os.getpid()

    def send(payload: bytes) -> None:
        if os.getpid() != owner:
            # A copy of the worker made by a candidate's fork() got here: only the worker speaks.
            os._exit(0)
        data = memoryview(frame(payload, key))
        while data:
            written = os.write(fd, data)
            data = data[written:]
        os.close(fd)

    return send
