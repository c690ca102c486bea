"""Host-wide device turns (sandbox.devices): real file locks, held by real processes at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest

from sandbox.devices import DeviceTurns
from tools.errors import ConfigError
from tools.protocol import EvalJob, JobResult

HOLD_S = 0.05


def _worker(lock_dir: str, devices: list[str], log: str, jobs: int, exclusive_share: float, seed: int) -> None:
    """Take ``jobs`` turns, a share of them exclusive; append (device, exclusive, start, end) per turn."""
    rng = random.Random(seed)
    turns = DeviceTurns(devices, Path(lock_dir))
    for _ in range(jobs):
        exclusive = rng.random() < exclusive_share
        with turns.hold(exclusive) as device:
            start = time.monotonic()
            time.sleep(HOLD_S)
            end = time.monotonic()
        with open(log, "a") as f:
            f.write(json.dumps([device, exclusive, start, end]) + "\n")


def _spawn(*args: object) -> multiprocessing.Process:
    proc = multiprocessing.get_context("spawn").Process(target=_worker, args=args)
    proc.start()
    return proc


def _turns(log: Path) -> list[tuple[str, bool, float, float]]:
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def _overlap(a: tuple[str, bool, float, float], b: tuple[str, bool, float, float]) -> bool:
    return a[0] == b[0] and a[2] < b[3] and b[2] < a[3]


def test_a_timing_turn_never_overlaps_any_other_on_its_device_while_checks_share(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    procs = [_spawn(str(tmp_path), ["0"], str(log), 12, 0.3, seed) for seed in range(4)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    turns = _turns(log)
    assert len(turns) == 48
    timed = [t for t in turns if t[1]]
    checks = [t for t in turns if not t[1]]
    assert timed and checks
    for t in timed:
        assert not [o for o in turns if o is not t and _overlap(t, o)], t
    # Checks do run side by side (four processes, most of their turns checks).
    assert any(_overlap(a, b) for i, a in enumerate(checks) for b in checks[i + 1 :])


def test_timing_turns_on_two_devices_run_at_once(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    procs = [_spawn(str(tmp_path), ["0", "1"], str(log), 6, 1.0, seed) for seed in range(2)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    turns = _turns(log)
    assert {t[0] for t in turns} == {"0", "1"}
    for i, a in enumerate(turns):
        assert not [b for b in turns[i + 1 :] if _overlap(a, b)]
    # Exclusive on each device, yet the two processes overlapped in time: one per device.
    assert any(a[2] < b[3] and b[2] < a[3] for a in turns for b in turns if a[0] != b[0])


def test_a_stream_of_checks_does_not_keep_a_timing_job_waiting(tmp_path: Path) -> None:
    log = tmp_path / "checks.jsonl"
    checkers = [_spawn(str(tmp_path), ["0"], str(log), 80, 0.0, seed) for seed in range(3)]
    try:
        time.sleep(0.5)  # the checks are flowing, overlapping one another
        asked = time.monotonic()
        with DeviceTurns(["0"], tmp_path).hold(exclusive=True):
            got = time.monotonic()
            assert all(p.is_alive() for p in checkers)  # it got in while checks were still being asked for
    finally:
        for proc in checkers:
            proc.kill()
            proc.join()
    # It waited for the checks in flight (each HOLD_S), not for the stream to end (80 * HOLD_S each).
    assert got - asked < 1.0, got - asked


def _wait_for(flag: Path, timeout_s: float = 30.0) -> None:
    """Wait until another process has created ``flag`` (it holds its turn then)."""
    deadline = time.monotonic() + timeout_s
    while not flag.exists():
        assert time.monotonic() < deadline, f"{flag.name} never appeared"
        time.sleep(0.05)


def _check_on_0_for(lock_dir: str, seconds: float) -> None:
    with DeviceTurns(["0", "1"], Path(lock_dir)).hold(exclusive=False) as device:
        assert device == "0"
        Path(lock_dir, "checking").touch()
        time.sleep(seconds)


def test_a_timing_job_takes_a_free_gpu_rather_than_wait_for_a_busy_one(tmp_path: Path) -> None:
    checker = multiprocessing.get_context("spawn").Process(target=_check_on_0_for, args=(str(tmp_path), 5.0))
    checker.start()
    try:
        _wait_for(tmp_path / "checking")
        asked = time.monotonic()
        with DeviceTurns(["0", "1"], tmp_path).hold(exclusive=True) as device:
            assert device == "1" and time.monotonic() - asked < 1.0
    finally:
        checker.kill()
        checker.join()


def test_a_process_killed_during_its_turn_gives_the_device_back(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    holder = multiprocessing.get_context("spawn").Process(target=_hold_forever, args=(str(tmp_path),))
    holder.start()
    try:
        _wait_for(tmp_path / "holding")
        proc = _spawn(str(tmp_path), ["0"], str(log), 1, 1.0, 0)
        time.sleep(0.5)
        assert not log.exists()  # waiting: the device is held
        os.kill(holder.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == 0 and len(_turns(log)) == 1
    finally:
        holder.kill()
        holder.join()


def _hold_forever(lock_dir: str) -> None:
    with DeviceTurns(["0"], Path(lock_dir)).hold(exclusive=True):
        Path(lock_dir, "holding").touch()
        time.sleep(3600)


def test_a_pool_needs_a_device() -> None:
    with pytest.raises(ConfigError, match="at least one device"):
        DeviceTurns([], Path("/tmp"))


def _hold_cpu_for(seconds: float, flag: str, exclusive: bool = True, slots: int = 1) -> None:
    from tools.paths import cache_dir  # $KFORGE_CACHE_DIR is this test session's, as for the sandbox

    # A timing job, or a check in flight holding ``slots`` of the device's shares.
    with DeviceTurns(["cpu"], cache_dir("locks")).hold(exclusive=exclusive, slots=slots):
        Path(flag).touch()
        time.sleep(seconds)


def _cpu_check_job() -> EvalJob:
    """A quick correctness check (no timing) of the hand-written CPU softmax."""
    from tests.conftest import CANDIDATES, PROBLEMS

    return EvalJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        candidate_source=(CANDIDATES / "softmax_cpu.py").read_text(),
        device="cpu",
        n_checks=1,
        references=["eager"],
        time_candidate=False,
    )


def _run_while_held(job: EvalJob, tmp_path: Path, exclusive: bool, slots: int = 1) -> tuple[JobResult, list[dict]]:
    """Run ``job`` on the local backend while another process holds the CPU for 2 s; its result and turn waits."""
    from structlog.testing import capture_logs

    from sandbox.config import LocalSandboxConfig
    from sandbox.local import LocalSandbox

    flag = tmp_path / "holding"
    holder = multiprocessing.get_context("spawn").Process(target=_hold_cpu_for, args=(2.0, str(flag), exclusive, slots))
    holder.start()
    try:
        _wait_for(flag)
        with capture_logs() as logs:
            result = LocalSandbox(LocalSandboxConfig(prefork=False)).run(job)
    finally:
        holder.join(30)
    assert result.status == "ok", result.reason
    return result, [e for e in logs if e["event"] == "device_turn"]


def test_the_local_backend_waits_for_its_turn_on_the_device(tmp_path: Path) -> None:
    # A check: it would share the CPU, but a timing job holds it.
    _, (waited,) = _run_while_held(_cpu_check_job(), tmp_path, exclusive=True)
    assert waited["device"] == "cpu" and not waited["exclusive"] and waited["waited_s"] >= 1.0


@pytest.mark.parametrize("slots", [1, 2, 3, 4])
def test_checks_share_a_device_while_their_shares_of_its_memory_add_up(tmp_path: Path, slots: int) -> None:
    job = _cpu_check_job().model_copy(update={"device_slots": slots})
    assert job.alone is (slots == 4)
    _, waits = _run_while_held(job, tmp_path, exclusive=False, slots=2)  # a check holding half the device
    if slots <= 2:
        assert waits == []
    else:
        (waited,) = waits  # until the other check ends: alone (4) or beside it, out of its shares (3)
        assert waited["exclusive"] is (slots == 4) and waited["waited_s"] >= 1.0


def test_a_check_asks_for_one_to_all_of_a_devices_shares(tmp_path: Path) -> None:
    for slots in (0, 5):
        with pytest.raises(ConfigError, match="1 to 4 shares"), DeviceTurns(["0"], tmp_path).hold(False, slots):
            pass


def test_shares_held_by_checks_never_exceed_the_device(tmp_path: Path) -> None:
    turns = DeviceTurns(["0"], tmp_path)
    held = 0
    most = 0
    mutex = threading.Lock()

    def check(slots: int) -> None:
        nonlocal held, most
        with turns.hold(False, slots):
            with mutex:
                held += slots
                most = max(most, held)
            time.sleep(0.05)
            with mutex:
                held -= slots

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, [1, 2, 3, 1, 2, 3, 1, 2] * 3))
    assert most <= 4 and most >= 3  # never over, and checks did run side by side


def test_evaluate_gives_a_check_the_shares_of_the_device_its_working_set_needs(tmp_path: Path) -> None:
    from sandbox.config import LocalSandboxConfig
    from sandbox.evaluation import evaluate
    from sandbox.local import LocalSandbox
    from tests.conftest import CANDIDATES, PROBLEMS
    from tools.problem import load_problem, working_set_bytes
    from tools.protocol import AnyJob

    class Recording(LocalSandbox):  # the real backend, keeping each job it ran
        jobs: ClassVar[list[AnyJob]] = []

        def run(self, job: AnyJob) -> JobResult:
            self.jobs.append(job)
            return super().run(job)

    problem = load_problem(PROBLEMS / "softmax_small.py")
    need = working_set_bytes(problem.info, n_checks=1, device="cpu")
    one_set = problem.info.input_bytes + problem.info.output_bytes
    # Answers beyond the plan's allowance wait off the device: more checks need no more of its memory.
    assert working_set_bytes(problem.info, n_checks=5, device="cpu") == need > 2 * one_set
    sandbox = Recording(LocalSandboxConfig(prefork=False))
    for available, slots in ((4 * need, 1), (4 * need - 1, 2), (need, 4)):
        ev = evaluate(
            problem,
            (CANDIDATES / "softmax_cpu.py").read_text(),
            sandbox=sandbox,
            device="cpu",
            available_bytes=available,
            references=("eager",),
            n_checks=1,
            time_candidate=False,
        )
        assert ev.result.status == "ok", ev.result.reason
        assert sandbox.jobs[-1].device_slots == slots


def test_a_job_still_running_is_said_on_the_console_with_what_it_waits_for() -> None:
    from structlog.testing import capture_logs

    from sandbox.config import LocalSandboxConfig
    from sandbox.evaluation import evaluate
    from sandbox.local import LocalSandbox
    from tests.conftest import CANDIDATES, PROBLEMS
    from tools.problem import load_problem

    with capture_logs() as logs:
        ev = evaluate(
            load_problem(PROBLEMS / "softmax_small.py"),
            (CANDIDATES / "softmax_cpu.py").read_text(),
            sandbox=LocalSandbox(LocalSandboxConfig(prefork=False)),  # a new interpreter: seconds before the verdict
            device="cpu",
            available_bytes=8 << 30,
            candidate_name="softmax_cpu.py",
            references=("eager",),
            n_checks=1,
            time_candidate=False,
            notice_after_s=0.2,
        )
    assert ev.result.status == "ok", ev.result.reason
    said = [e for e in logs if e.get("progress")]
    assert said and said[0]["event"].startswith("waiting for the job of softmax_cpu.py on cpu (a turn, the reference, ")
    assert said[0]["waited_s"] >= 0


def _hold_cpu_until(flag: str, release: str) -> None:
    from tools.paths import cache_dir

    with DeviceTurns(["cpu"], cache_dir("locks")).hold(exclusive=True):
        Path(flag).touch()
        _wait_for(Path(release), timeout_s=120)


def test_the_fork_server_starts_while_a_job_waits_for_its_turn_not_during_it(tmp_path: Path) -> None:
    from sandbox.config import LocalSandboxConfig
    from sandbox.local import LocalSandbox

    job = _cpu_check_job()
    flag, release = tmp_path / "holding", tmp_path / "release"
    holder = multiprocessing.get_context("spawn").Process(target=_hold_cpu_until, args=(str(flag), str(release)))
    holder.start()
    sandbox = LocalSandbox(LocalSandboxConfig(prefork=True))
    try:
        _wait_for(flag)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(sandbox.run, job)
            deadline = time.monotonic() + 120
            # The server imports torch (seconds) while the job waits; a job holding the CPU would not wait.
            while not (sandbox._forkserver is not None and sandbox._forkserver.ready):
                assert time.monotonic() < deadline, "the fork server never became ready"
                time.sleep(0.05)
            assert holder.is_alive() and not running.done()
            release.touch()
            result = running.result(timeout=120)
    finally:
        release.touch()
        holder.join(30)
        sandbox.close()
    assert result.status == "ok", result.reason


class _LateRecv:
    """A socket whose every recv begins half a second late: the moment between two events, made wide."""

    def __init__(self, sock: object) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        time.sleep(0.5)
        return self._sock.recv(size)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def test_closing_the_fork_server_waits_for_its_events_thread_and_reports_no_error() -> None:
    """Closed between two of the events thread's reads, the socket failed the next one (EBADF), logged as a
    socket error: an interrupted batch's sandboxes closed so."""
    import sys

    from structlog.testing import capture_logs

    from sandbox.prefork import ForkServerClient

    client = ForkServerClient(sys.executable, dict(os.environ))
    # The thread waits in its first read for the server's imports (seconds); its next read, after the
    # "ready" event, comes late, and close() comes in between.
    client._sock = _LateRecv(client._sock)  # type: ignore[assignment]
    client.wait_ready()
    with capture_logs() as logs:
        client.close()
    assert [e for e in logs if e["log_level"] != "info"] == []
    assert not client.alive


@pytest.mark.gpu
def test_cuda_jobs_run_on_a_gpu_of_the_pool_and_say_which() -> None:
    from sandbox.config import LocalSandboxConfig
    from sandbox.local import LocalSandbox
    from tests.conftest import CANDIDATES, PROBLEMS
    from tools.device import visible_gpus

    gpus = visible_gpus()
    job = EvalJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        candidate_source=(CANDIDATES / "softmax_cuda.py").read_text(),
        n_checks=1,
        references=["eager"],
    )
    result = LocalSandbox(LocalSandboxConfig(gpus=[gpus[-1].index])).run(job)
    assert result.status == "ok", result.reason
    assert result.environment["gpu_index"] == gpus[-1].index
    assert result.environment["gpu"] == gpus[-1].name  # the worker's own entry, untouched
    with pytest.raises(ConfigError, match="not visible here"):
        LocalSandbox(LocalSandboxConfig(gpus=["no-such-gpu"])).run(job)


SMI = ["0, GPU-aaaa-1111, NVIDIA H200", "1, GPU-bbbb-2222, NVIDIA H200", "2, GPU-cccc-3333, NVIDIA L40S"]


def test_visible_gpus_follow_cuda_visible_devices_as_cuda_reads_it() -> None:
    from tools.device import visible_from

    assert [g.index for g in visible_from(SMI, None)] == ["0", "1", "2"]
    assert [(g.index, g.env_id) for g in visible_from(SMI, "1,0")] == [("1", "GPU-bbbb-2222"), ("0", "GPU-aaaa-1111")]
    assert [g.index for g in visible_from(SMI, "GPU-cccc,0")] == ["2", "0"]  # a UUID prefix names a GPU
    assert [g.index for g in visible_from(SMI, "1,7,0")] == ["1"]  # CUDA stops at the first unknown entry
    assert visible_from(SMI, "") == [] and visible_from(SMI, "-1") == []
    (mig,) = visible_from(SMI[:2], "MIG-dddd")
    assert mig.env_id == "MIG-dddd" and mig.name == "MIG slice of NVIDIA H200"


def test_a_pool_takes_the_gpus_asked_for_of_one_model_only(tmp_path: Path) -> None:
    from sandbox.devices import gpu_pool
    from tools.device import visible_from
    from tools.errors import EnvironmentProblem

    visible = visible_from(SMI, None)
    turns, gpus = gpu_pool(["GPU-bbbb-2222", "0"], tmp_path, visible)
    assert turns.devices == ["1", "0"] and gpus["1"].env_id == "GPU-bbbb-2222"
    with turns.hold(exclusive=True) as first, turns.hold(exclusive=True) as second:
        assert {first, second} == {"0", "1"}  # each timing turn on a GPU of its own
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"GPU-{x}.{kind}" for x in ("aaaa-1111", "bbbb-2222") for kind in ("lock", "turn")
    )  # named by UUID: processes that number the GPUs differently still share the locks
    with pytest.raises(ConfigError, match=r"different models \(NVIDIA H200, NVIDIA L40S\)"):
        gpu_pool(None, tmp_path, visible)
    with pytest.raises(ConfigError, match="GPU '5' is not visible here"):
        gpu_pool(["5"], tmp_path, visible)
    with pytest.raises(EnvironmentProblem, match="no CUDA GPU is visible"):
        gpu_pool(None, tmp_path, [])


def test_a_long_wait_for_a_turn_is_said_on_the_console(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A timing job waiting for a check in flight: after WAIT_NOTICE_S the console says so, at the default level,
    where other info events stay in events.jsonl; and nothing more once it holds its turn."""
    from graphs.logs import configure_logging
    from sandbox.devices import WAIT_NOTICE_S

    events = tmp_path / "events.jsonl"
    configure_logging(verbose=False, events_path=events)
    checker = multiprocessing.get_context("spawn").Process(
        target=_check_on_0_for, args=(str(tmp_path), WAIT_NOTICE_S + 1.5)
    )
    checker.start()
    try:
        _wait_for(tmp_path / "checking")
        with DeviceTurns(["0"], tmp_path).hold(exclusive=True):
            said = capsys.readouterr().err
            time.sleep(WAIT_NOTICE_S + 0.5)  # holding its turn: no notice any more
    finally:
        checker.kill()
        checker.join()
        configure_logging(verbose=False)
    assert said.count("waiting for a timing turn on a device of 0") == 1, said
    assert "waiting for" not in capsys.readouterr().err
    logged = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(e.get("progress") and e.get("waited_s", 0) >= 2 for e in logged), logged
    assert any(e["event"] == "device_turn" for e in logged)  # an info event: in the file, not on the console
    assert "device_turn" not in said
