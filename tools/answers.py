"""Where the worker keeps the answers it computed before any candidate code existed.

Every check's expected outputs are computed up front, so a candidate that patches torch cannot change them; holding
them all on the device would cost ``n_checks`` outputs. ``AnswerStore`` keeps each set on the device while the memory
plan's allowance has room (``tools.memory.Plan``) and parks the rest: in host memory for a GPU job, in an unlinked
scratch file for a CPU job (whose host memory is its device memory). A GPU job parks in page-locked memory, which moves
at the bus's full speed: ``view`` hands such a set out where it is, for comparisons that copy it to the device a piece
at a time (``tools.correctness.pieces``), so a parked answer never needs a whole output's room on the device again.
The page-locked memory is ordinary memory first touched by all of torch's threads and then registered with the
driver (``to_host``): torch's own page-locked allocation touches and locks it in one thread, at about 1.35 GB/s,
which made parking most of a large problem's check (bench/RESULTS.md, issue 36).
``get`` brings a set back to the device whole (a CPU job's file, or a caller that needs the tensors there); the
caller drops it afterwards. A parked tensor's device copy is poisoned before it is freed, so memory a candidate
never wrote cannot hold a right answer.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from dataclasses import dataclass
from typing import IO, Any

import structlog
import torch

from tools.memory import tensor_bytes


@dataclass(frozen=True)
class _Parked:
    """A tensor kept off the device: its layout, and its values (a host tensor, or a range of the scratch file)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    host: torch.Tensor | None = None
    offset: int = 0
    nbytes: int = 0


log = structlog.get_logger(__name__)

_LOCKED: dict[int, int] = {}  # start of each locked range: its bytes
# Smaller answers move fast enough from pageable memory, and share their pages with other small allocations, which a
# second registration of the same page would refuse.
LOCK_FROM = 1 << 20


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of a device tensor in page-locked host memory, in its layout: both ways at the bus's speed, where
    pageable memory moves at a fraction of it. The memory stays locked while the copy lives (``_locked``)."""
    host = torch.empty_like(t, device="cpu")
    # The first touch of each page is the kernel's work (a fault and a zeroed page): spread over torch's threads it
    # runs many times faster than inside the driver's registration or the copy, which take the faults in one thread.
    every_byte(host).zero_()
    _locked(host)
    return host.copy_(t.detach())


def every_byte(t: torch.Tensor) -> torch.Tensor:
    """A flat byte view of the whole memory of ``t`` (whatever its strides)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())


def _locked(host: torch.Tensor) -> None:
    """Lock ``host``'s pages for the GPU (``cuMemHostRegister``) until the tensor is collected. The driver API, not
    the runtime's ``cudaHostRegister``: a refusal there would stay behind as the runtime's last error, which torch
    raises at its next kernel launch. Where the driver refuses (a host that limits locked memory), the answer stays
    in pageable memory: as correct, slower to move."""
    from cuda.bindings import driver

    storage = host.untyped_storage()
    if storage.nbytes() < LOCK_FROM:
        return
    ptr = storage.data_ptr()
    (err,) = driver.cuMemHostRegister(ptr, storage.nbytes(), driver.CU_MEMHOSTREGISTER_PORTABLE)
    if err != driver.CUresult.CUDA_SUCCESS:
        log.warning("answer_left_pageable", bytes=storage.nbytes(), error=str(err))
        return
    _LOCKED[ptr] = storage.nbytes()
    # The finalizer holds the storage: its memory cannot be freed before the driver lets go of the pages.
    weakref.finalize(host, _unlock, storage, ptr)


def _unlock(storage: torch.UntypedStorage, ptr: int) -> None:
    from cuda.bindings import driver

    del _LOCKED[ptr]
    (err,) = driver.cuMemHostUnregister(ptr)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuMemHostUnregister: {err}")
    del storage


def locked_bytes() -> int:
    """Host memory this process holds locked for parked answers now."""
    return sum(_LOCKED.values())


def poison(t: torch.Tensor) -> None:
    """Overwrite a tensor the worker is done with, so freed memory never holds an answer."""
    if t.numel():
        with torch.no_grad():
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype != torch.bool:
                t.fill_(0x7F)


class AnswerStore:
    """Answer sets by key, each on ``device`` while ``allowance`` bytes have room, else parked."""

    def __init__(self, device: torch.device, allowance: int, scratch: str | None = None) -> None:
        self.device, self.allowance = device, allowance
        self._scratch = scratch
        self._file: IO[bytes] | None = None
        self._end = 0
        self._sets: dict[Any, list[torch.Tensor | _Parked | Any]] = {}
        self.device_bytes = 0
        self.parked_bytes = 0

    def put(self, key: Any, values: list[Any], *, keep_on_device: bool | None = None) -> None:
        """Store a set (tensors and other leaves). ``keep_on_device``: the plan's decision; None: while room is left."""
        size = tensor_bytes(values)
        on_device = self.device_bytes + size <= self.allowance if keep_on_device is None else keep_on_device
        if on_device:
            self._sets[key] = list(values)
            self.device_bytes += size
            return
        self._sets[key] = [self._park(v) if isinstance(v, torch.Tensor) else v for v in values]
        self.parked_bytes += size

    def __contains__(self, key: Any) -> bool:
        return key in self._sets

    def on_device(self, key: Any) -> bool:
        return not any(isinstance(v, _Parked) for v in self._sets[key])

    def get(self, key: Any) -> list[Any]:
        """The set on the device: the stored tensors themselves, or fresh copies of parked ones."""
        return [self._unpark(v) if isinstance(v, _Parked) else v for v in self._sets[key]]

    def view(self, key: Any) -> list[Any]:
        """The set for reading a piece at a time: tensors on the device, in host memory where a GPU job parked them
        (read-only: the store still holds them), or brought back from a CPU job's file. ``devices`` says where
        each belongs."""
        return [
            (v.host if v.host is not None else self._unpark(v)) if isinstance(v, _Parked) else v
            for v in self._sets[key]
        ]

    def devices(self, key: Any) -> list[torch.device | None]:
        """The device each value of a set was computed on (None for a value that is not a tensor)."""
        return [
            v.device if isinstance(v, _Parked | torch.Tensor) else None  # type: ignore[union-attr]
            for v in self._sets[key]
        ]

    def drop(self, key: Any) -> None:
        for v in self._sets.pop(key):
            if isinstance(v, torch.Tensor):
                poison(v)
                self.device_bytes -= v.numel() * v.element_size()

    def clear(self) -> None:
        for key in list(self._sets):
            self.drop(key)
        if self._file is not None:
            self._file.close()
            self._file = None

    # ---- parking

    def _park(self, t: torch.Tensor) -> _Parked:
        t = t.detach()
        layout = {"shape": tuple(t.shape), "stride": tuple(t.stride()), "dtype": t.dtype, "device": t.device}
        if t.device.type == "cuda":
            parked = _Parked(**layout, host=to_host(t))
            poison(t)
            return parked
        # On the CPU the host is the device: write the values to a file nobody can open by name.
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self._scratch)  # noqa: SIM115 (closed by clear())
        raw = memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())
        offset, done = self._end, 0
        while done < raw.nbytes:  # one write moves at most 2 GiB on Linux
            done += os.pwrite(self._file.fileno(), raw[done:], offset + done)
        self._end += raw.nbytes
        poison(t)
        return _Parked(**layout, offset=offset, nbytes=raw.nbytes)

    def _unpark(self, p: _Parked) -> torch.Tensor:
        out = torch.empty_strided(p.shape, p.stride, dtype=p.dtype, device=self.device)
        if p.host is not None:
            out.copy_(p.host)
            return out
        assert self._file is not None
        # Read straight into the answer's memory where its layout is the file's (no second copy of it held).
        dense = out if out.is_contiguous() else torch.empty(p.shape, dtype=p.dtype)
        raw = memoryview(dense.reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < p.nbytes:  # pread may return less than asked for, and at most 2 GiB a call
            n = os.preadv(self._file.fileno(), [raw[done:]], p.offset + done)
            if n <= 0:
                raise OSError(f"the answer file ended {p.nbytes - done} bytes early")
            done += n
        if dense is not out:
            out.copy_(dense)
        return out
