"""Whose turn it is on each device of this host: the local and docker backends' job placement.

A timing job needs its device to itself (a concurrent kernel steals bandwidth and SMs from the timed
one, a concurrent CPU check steals cores); a correctness check only needs a device, and checks share
one while their working sets fit its memory together: each holds ``EvalJob.device_slots`` of the
device's ``DEVICE_SLOTS`` shares (tools.device_shares; two checks of softmax_65536x4096 ran an 80 GB H100
out of memory, as would three mid-sized KernelBench problems). A CUDA job goes to one of the pool's GPUs
(the least busy, as this process sees it, that is free for it), a CPU job to the host's one CPU device.

Turns are advisory file locks in the shared cache folder, so every kforge process of the host takes
them together (the problems of a batch, a suite, a `kforge run` started beside them), and a process
that dies releases its turns with it. Each device has two lock files: a turnstile and the device
itself. A check passes the turnstile and then holds the device shared; a timing job holds the
turnstile while it waits for the checks in flight to end and then holds the device exclusively, so a
stream of checks cannot keep it waiting for good. A check also holds its shares, one lock file each
(``<device>.share<i>``), taken without waiting: one that finds too few free looks at the next device
or tries again shortly.

Which GPU ran a job never changes its verdict, and every speedup is a ratio of two times taken in one
job on one GPU. Absolute times are only held against the roofline of the GPU model, which is why a
pool takes GPUs of one model only.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

import structlog

from tools.device_shares import DEVICE_SLOTS
from tools.errors import ConfigError, EnvironmentProblem
from tools.paths import cache_dir, open_flock

if TYPE_CHECKING:  # both import torch: a process that only takes turns need not
    from tools.device import VisibleGpu
    from tools.protocol import AnyJob

log = structlog.get_logger(__name__)
POLL_S = 0.05  # between rounds of non-blocking tries when every device is taken
CPU = "cpu"
# A wait for a turn is said on the console after this long, then every WAIT_REPEAT_S: other runs' jobs on the
# host can hold a device for minutes, and a silent wait looks like a hang.
WAIT_NOTICE_S, WAIT_REPEAT_S = 2.0, 30.0


class WaitNotice:
    """From ``first_s`` (``WAIT_NOTICE_S``) on, a ``waiting`` event every ``WAIT_REPEAT_S`` until ``stop``: marked
    ``progress=True``, which the CLI's console shows at any log level (graphs.logs). A thread of its own, so that a
    wait blocked in the kernel (a timing job's lock) is said too."""

    def __init__(self, what: str, first_s: float = WAIT_NOTICE_S) -> None:
        self.what, self.since, self._done = what, time.perf_counter(), threading.Event()
        self._first_s = first_s
        self._thread = threading.Thread(target=self._say, name="kforge-wait-notice", daemon=True)
        self._thread.start()

    def _say(self) -> None:
        delay = self._first_s
        while not self._done.wait(delay):
            waited = round(time.perf_counter() - self.since)
            log.info(f"waiting for {self.what}: {waited} s so far", waited_s=waited, progress=True)
            delay = WAIT_REPEAT_S

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _lock_name(device: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in device)


class DeviceTurns:
    """Host-wide turns on a set of devices: ``hold(exclusive)`` yields the device a job may use."""

    def __init__(self, devices: Sequence[str], lock_dir: Path, lock_names: Sequence[str] | None = None) -> None:
        if not devices:
            raise ConfigError("a device pool needs at least one device")
        self.devices = list(devices)
        names = list(lock_names or devices)
        lock_dir.mkdir(parents=True, exist_ok=True)
        self._turnstile = {d: lock_dir / f"{_lock_name(n)}.turn" for d, n in zip(self.devices, names, strict=True)}
        self._device = {d: lock_dir / f"{_lock_name(n)}.lock" for d, n in zip(self.devices, names, strict=True)}
        self._shares = {
            d: [lock_dir / f"{_lock_name(n)}.share{i}" for i in range(DEVICE_SLOTS)]
            for d, n in zip(self.devices, names, strict=True)
        }
        self._busy = dict.fromkeys(self.devices, 0)  # this process's holds, to spread its own jobs
        self._mutex = threading.Lock()

    def _order(self) -> list[str]:
        with self._mutex:
            return sorted(self.devices, key=lambda d: self._busy[d])

    @contextlib.contextmanager
    def _count(self, device: str) -> Iterator[None]:
        with self._mutex:
            self._busy[device] += 1
        try:
            yield
        finally:
            with self._mutex:
                self._busy[device] -= 1

    def _take_shares(self, device: str, slots: int) -> list[IO[str]] | None:
        """``slots`` of the device's free shares, held (their lock handles), or None if fewer are free."""
        taken: list[IO[str]] = []
        for path in self._shares[device]:
            if len(taken) == slots:
                break
            handle = open_flock(path, fcntl.LOCK_EX, blocking=False)
            if handle is not None:
                taken.append(handle)
        if len(taken) == slots:
            return taken
        for handle in taken:
            handle.close()
        return None

    @contextlib.contextmanager
    def hold(self, exclusive: bool, slots: int = 1) -> Iterator[str]:
        """Wait for a device that is free for this job, hold it while the block runs, yield its name.

        A check (``exclusive`` False) holds ``slots`` of the device's shares of memory besides the device.
        """
        if not 1 <= slots <= DEVICE_SLOTS:
            raise ConfigError(f"a check holds 1 to {DEVICE_SLOTS} shares of a device, not {slots}")
        where = "the CPU" if self.devices == [CPU] else f"a device of {', '.join(self.devices)}"
        notice = WaitNotice(f"{'a timing turn' if exclusive else 'a turn'} on {where}")
        try:
            yield from self._hold(exclusive, slots, notice)
        finally:
            notice.stop()

    def _hold(self, exclusive: bool, slots: int, notice: WaitNotice) -> Iterator[str]:
        while True:
            # A timing job first looks for a device with no check in flight, and only then waits on one.
            for device, wait in [(d, False) for d in self._order()] + [(d, True) for d in self._order()]:
                if wait and not exclusive:
                    break  # a check never waits here: it gets a device at once or none
                turn = open_flock(self._turnstile[device], fcntl.LOCK_EX, blocking=False)
                if turn is None:  # a timing job holds or awaits this device
                    continue
                try:
                    # A check gets the device at once (a timing job would hold the turnstile); a timing
                    # job that waits does so here, turnstile held, for the checks in flight to end.
                    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
                    held = open_flock(self._device[device], mode, blocking=wait or not exclusive)
                except BaseException:
                    turn.close()
                    raise
                if held is None:  # checks are in flight on it: look further before waiting
                    turn.close()
                    continue
                shares: list[IO[str]] = []
                if not exclusive:
                    turn.close()  # let the next check through while this one runs
                    taken = self._take_shares(device, slots)
                    if taken is None:  # other checks hold too much of its memory
                        held.close()
                        continue
                    shares = taken
                try:
                    with self._count(device):
                        notice.stop()
                        self._log_wait(device, exclusive, notice.since)
                        yield device
                finally:
                    for handle in shares:
                        handle.close()
                    held.close()
                    if exclusive:
                        turn.close()
                return
            time.sleep(POLL_S)

    @staticmethod
    def _log_wait(device: str, exclusive: bool, since: float) -> None:
        waited = time.perf_counter() - since
        if waited > 1.0:
            log.info("device_turn", device=device, exclusive=exclusive, waited_s=round(waited, 2))


def gpu_pool(
    gpus: Sequence[str] | None, lock_dir: Path, visible: Sequence[VisibleGpu] | None = None
) -> tuple[DeviceTurns, dict[str, VisibleGpu]]:
    """Turns on ``gpus`` (indices or UUIDs; None: every one of ``visible``, by default the GPUs this
    process sees), all of one model, by index."""
    if visible is None:
        from tools.device import visible_gpus

        visible = visible_gpus()
    if not visible:
        raise EnvironmentProblem("a CUDA job, but no CUDA GPU is visible on this host")
    by_name = {g.index: g for g in visible} | {g.uuid: g for g in visible if g.uuid}
    chosen: dict[str, VisibleGpu] = {}
    for wanted in gpus if gpus is not None else [g.index for g in visible]:
        if wanted not in by_name:
            raise ConfigError(f"GPU {wanted!r} is not visible here (visible: {', '.join(g.index for g in visible)})")
        chosen[by_name[wanted].index] = by_name[wanted]
    models = sorted({g.name for g in chosen.values()})
    if len(models) > 1:
        raise ConfigError(f"the pool's GPUs are of different models ({', '.join(models)}): name one model's GPUs")
    # Locks are named by UUID, so that processes that see the GPUs through different
    # $CUDA_VISIBLE_DEVICES still take turns on the same physical GPU.
    pool = DeviceTurns(list(chosen), lock_dir, [g.uuid or f"gpu{g.index}" for g in chosen.values()])
    return pool, chosen


class HostDevices:
    """A backend's turns on this host: over its GPU pool for CUDA jobs, on the CPU for CPU jobs.

    The pools are made on first use, so a CPU-only run never looks for GPUs.
    """

    def __init__(self, gpus: Sequence[str] | None) -> None:
        self.gpus = list(gpus) if gpus is not None else None
        self._pools: dict[str, tuple[DeviceTurns, dict[str, VisibleGpu]]] = {}
        self._mutex = threading.Lock()

    def _pool(self, device: str) -> tuple[DeviceTurns, dict[str, VisibleGpu]]:
        with self._mutex:
            if device not in self._pools:
                locks = cache_dir("locks")
                cpu: tuple[DeviceTurns, dict[str, VisibleGpu]] = (DeviceTurns([CPU], locks), {})
                self._pools[device] = gpu_pool(self.gpus, locks) if device == "cuda" else cpu
            return self._pools[device]

    @contextlib.contextmanager
    def turn(self, job: AnyJob) -> Iterator[VisibleGpu | None]:
        """Hold a device for ``job`` (alone if it needs it alone); yield its GPU, None for the CPU."""
        turns, gpus = self._pool(job.device)
        with turns.hold(exclusive=job.alone, slots=job.device_slots) as device:
            yield gpus.get(device)
