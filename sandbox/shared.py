"""What crosses between a job's judge and its runner (``sandbox.runner``): messages on a socket, tensors in memory.

The two directions are not alike, since only one side is trusted. The judge's messages to the runner are pickled (the
runner trusts its judge). The runner's to the judge are JSON of bounded size, parsed into plain values and
validated: nothing the runner sends is unpickled, imported or called. Tensors travel as ``memfd`` files passed
with the message (``SCM_RIGHTS``) and mapped on both sides: the judge's input buffers are mapped by the runner and
written by the judge alone (the runner may write them too, which the judge's fingerprints catch); an output is
written by the runner into a file of its own, which the judge copies into its own memory before it looks at it.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import pickle
import socket
import struct
from collections.abc import Sequence
from typing import Any

import torch

MAX_FDS = 250  # SCM_RIGHTS carries at most 253 descriptors a message
MAX_JSON_BYTES = 1 << 20  # what the runner may say in one message
_SIZE = struct.Struct("!Q")
_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


class Hangup(EOFError):
    """The other side closed the socket or died."""


class Garbled(ValueError):
    """The runner's bytes are not a message: too long, not JSON, not an object."""


def _recv_exactly(sock: socket.socket, size: int, fds: list[int]) -> bytes:
    data = b""
    while len(data) < size:
        chunk, got, _, _ = socket.recv_fds(sock, size - len(data), MAX_FDS)
        if not chunk:
            for fd in got:
                os.close(fd)
            raise Hangup("the other side of the job's socket is gone")
        data += chunk
        fds += got
    return data


def send(sock: socket.socket, payload: bytes, fds: Sequence[int] = ()) -> None:
    """One frame: its length, then its bytes, the descriptors riding on the first byte."""
    data = _SIZE.pack(len(payload)) + payload
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket, limit: int | None = None) -> tuple[bytes, list[int]]:
    """One frame and the descriptors that came with it; a frame over ``limit`` bytes ends the conversation."""
    fds: list[int] = []
    (size,) = _SIZE.unpack(_recv_exactly(sock, _SIZE.size, fds))
    if limit is not None and size > limit:
        for fd in fds:
            os.close(fd)
        raise Garbled(f"a message of {size} bytes, over the {limit} allowed")
    return _recv_exactly(sock, size, fds), fds


def send_pickled(sock: socket.socket, message: Any, fds: Sequence[int] = ()) -> None:
    """Judge to runner."""
    send(sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), fds)


def receive_pickled(sock: socket.socket) -> tuple[Any, list[int]]:
    """In the runner: a message from the judge."""
    data, fds = receive(sock)
    return pickle.loads(data), fds


def send_json(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Runner to judge."""
    send(sock, json.dumps(message).encode(), fds)


def receive_json(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """In the judge: a message from the runner, as plain JSON values (a dict at the top)."""
    data, fds = receive(sock, MAX_JSON_BYTES)
    try:
        message = json.loads(data)
    except ValueError as exc:
        close_all(fds)
        raise Garbled(f"bytes that are not JSON ({exc})") from exc
    if not isinstance(message, dict):
        close_all(fds)
        raise Garbled("JSON that is not an object")
    return message, fds


# ----------------------------------------------------------------------------------------------- tensors


def _mapped(fd: int, size: int, writable: bool) -> mmap.mmap:
    return mmap.mmap(fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))


def _view(buffer: mmap.mmap, dtype: torch.dtype, count: int) -> torch.Tensor:
    if count == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(buffer, dtype=dtype, count=count)


def share(t: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, Any]]:
    """A CPU tensor in a new ``memfd`` holding ``t``'s values and layout: (the tensor, the file, its description)."""
    span = t.untyped_storage().nbytes() // t.element_size()
    fd = os.memfd_create("kforge-tensor", os.MFD_CLOEXEC)
    os.ftruncate(fd, max(span * t.element_size(), 1))
    flat = _view(_mapped(fd, span * t.element_size(), writable=True), t.dtype, span)
    shared = flat.as_strided(t.shape, t.stride(), t.storage_offset())
    with torch.no_grad():
        shared.copy_(t)
    meta = {"dtype": str(t.dtype), "span": span, "shape": list(t.shape), "stride": list(t.stride())}
    return shared, fd, meta | {"offset": t.storage_offset()}


def attach(fd: int, meta: dict[str, Any]) -> torch.Tensor:
    """In the runner: the judge's shared tensor, mapped writable (a write to an input is the judge's to see)."""
    dtype = _DTYPES[meta["dtype"].removeprefix("torch.")]
    size = meta["span"] * torch.empty((), dtype=dtype).element_size()
    flat = _view(_mapped(fd, size, writable=True), dtype, meta["span"])
    os.close(fd)
    return flat.as_strided(meta["shape"], meta["stride"], meta["offset"])


def share_values(values: Sequence[Any]) -> tuple[list[Any], list[Any], list[int]]:
    """A list of inputs (or parameters) for the runner: (the values with each tensor now in shared memory, the slots
    to send: a tensor as ``("tensor", index, description)`` of the files returned beside them, another value as it
    is, pickled; the files)."""
    shared: list[Any] = []
    slots: list[Any] = []
    fds: list[int] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            t, fd, meta = share(v.detach())
            shared.append(t)
            slots.append(("tensor", len(fds), meta))
            fds.append(fd)
        else:
            shared.append(v)
            slots.append(("value", v))
    if len(fds) > MAX_FDS:
        raise ValueError(f"{len(fds)} tensors in one message, over the {MAX_FDS} a socket carries")
    return shared, slots, fds


def attach_values(slots: Sequence[Any], fds: Sequence[int]) -> list[Any]:
    """In the runner: what ``share_values`` sent."""
    return [attach(fds[s[1]], s[2]) if s[0] == "tensor" else s[1] for s in slots]


# ----------------------------------------------------------------------------------------------- outputs
#
# The judge makes one output slot per output the reference returns, a file as large as the larger of its answers
# (the second shape's included), and sends them once. The runner copies each output of a call into its slot and
# describes it; the judge copies the slot into memory of its own before anything reads it.


class Foreign:
    """Stands for an output that was not a plain tensor of the job's device: no comparison passes it, and the
    reason names what it was (its class is named so: ``foreign("FakeTensor")`` is a ``FakeTensor``)."""


def foreign(what: str) -> Foreign:
    return type(what[:80] or "unknown", (Foreign,), {})()


def make_slot(nbytes: int) -> tuple[mmap.mmap, int]:
    """In the judge: a slot of ``nbytes`` (its mapping, its file)."""
    fd = os.memfd_create("kforge-output", os.MFD_CLOEXEC)
    os.ftruncate(fd, max(nbytes, 1))
    return _mapped(fd, nbytes, writable=True), fd


def attach_slot(fd: int) -> mmap.mmap:
    """In the runner: the judge's slot, mapped writable."""
    size = os.fstat(fd).st_size
    buffer = _mapped(fd, size, writable=True)
    os.close(fd)
    return buffer


def write_output(o: Any, device: torch.device, slot: mmap.mmap | None) -> dict[str, Any]:
    """In the runner: one output copied into its slot, and its description (the data is left out where the slot is
    too small: an output of another shape or dtype than the reference's fails on that alone)."""
    if type(o) is not torch.Tensor and type(o) is not torch.nn.Parameter:
        return {"kind": "other", "type": type(o).__name__[:80]}
    if o.device != device:
        return {"kind": "other", "type": f"tensor on {o.device}"[:80]}
    t = o.detach()
    meta = {"kind": "tensor", "dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride())}
    if slot is None or t.numel() * t.element_size() > len(slot):
        return meta | {"written": False}
    view = _view(slot, t.dtype, t.numel())
    with torch.no_grad():
        view.view(t.shape).copy_(t)
    del view
    return meta | {"written": True}


def _dense(shape: list[int], stride: list[int]) -> bool:
    """Does ``stride`` lay ``shape`` out densely, no element twice (a permutation of a contiguous layout)?"""
    expected = 1
    for size, step in sorted(zip(shape, stride, strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if step != expected:
            return False
        expected *= size
    return True


def _sizes(values: Any) -> bool:
    return isinstance(values, list) and len(values) <= 64 and all(type(x) is int and x >= 0 for x in values)


def read_output(meta: Any, slot: mmap.mmap | None, device: torch.device) -> Any:
    """In the judge: one output the runner described, copied from its slot into the judge's own memory, in the
    runner's layout where that is a dense one. One it did not write (too large for its slot) comes back as a meta
    tensor of its shape and dtype, which the comparison refuses on those; anything malformed as a ``Foreign``."""
    if not isinstance(meta, dict) or meta.get("kind") != "tensor":
        what = meta.get("type") if isinstance(meta, dict) else None
        return foreign(str(what) if what else "unknown")
    dtype = _DTYPES.get(str(meta.get("dtype")).removeprefix("torch."))
    shape, stride = meta.get("shape"), meta.get("stride")
    if dtype is None or not _sizes(shape) or not _sizes(stride) or len(shape) != len(stride):
        return foreign("malformed output description")
    count = math.prod(shape)
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    if meta.get("written") is not True or slot is None or nbytes > len(slot):
        return torch.empty(shape, dtype=dtype, device="meta")
    plain = _view(slot, dtype, count).clone().view(shape)  # the judge's copy: what the runner writes later is not in it
    if _dense(shape, stride) and stride != list(plain.stride()):
        out = torch.empty_strided(shape, stride, dtype=dtype)
        out.copy_(plain)
        plain = out
    return plain.to(device)


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)
