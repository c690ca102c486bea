"""The local backend's containment (sandbox.contain), for real: a job in its own PID, network, IPC and mount
namespaces cannot reach the host's listeners or processes, leaves no daemon and no /dev/shm file behind, and says
what it got. Both ways the backend starts a worker: forked from the fork server, and as a new interpreter.

Each fixture in tests/fixtures/contain is an attack; the test fills in the one constant it needs (a port, a pid, a
path) and judges by what happened on the host, not by the fixture's words alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sandbox import contain
from sandbox.config import LocalSandboxConfig
from sandbox.local import LocalSandbox
from tests.conftest import FIXTURES, PROBLEMS
from tools.paths import cache_dir
from tools.protocol import EvalJob, JobResult, TimingConfig

ATTACKS = FIXTURES / "contain"
SANDBOXES = {
    "prefork": LocalSandbox(LocalSandboxConfig(prefork=True)),
    "subprocess": LocalSandbox(LocalSandboxConfig(prefork=False)),
}


EVERYTHING = f"{contain.NAMESPACES},{contain.LOCKED}"
PROBED = contain.probe()
pytestmark = pytest.mark.skipif(PROBED != EVERYTHING, reason=f"not every namespace here: {PROBED}")


@pytest.fixture(params=sorted(SANDBOXES))
def sandbox(request: pytest.FixtureRequest) -> LocalSandbox:
    return SANDBOXES[request.param]


def run(sandbox: LocalSandbox, attack: str, **constants: object) -> JobResult:
    source = (ATTACKS / attack).read_text()
    for name, value in constants.items():
        source, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", source, flags=re.MULTILINE)
        assert n == 1, f"{attack} has no constant {name}"
    return sandbox.run(job(source, attack))


def job(candidate_source: str | None, candidate_name: str = "candidate.py") -> EvalJob:
    """A check of ``candidate_source`` on the CPU softmax; None: the reference's baseline, no candidate code."""
    return EvalJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        candidate_name=candidate_name,
        candidate_source=candidate_source,
        device="cpu",
        references=["eager"],
        timing=TimingConfig(min_trials=3, min_seconds=0.0, warmup_trials=1),
        time_candidate=False,
        timeout_s=60,
    )


def test_a_job_says_which_namespaces_it_ran_in(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "shm_litter.py", NAME=f"kforge-{uuid.uuid4().hex}")
    assert result.environment.get("containment") == EVERYTHING, result.environment
    baseline = sandbox.run(job(None))
    # No candidate code: the namespaces, but its files as they are (it may write the shared caches).
    assert baseline.environment.get("containment") == contain.NAMESPACES, baseline.environment


def test_nothing_outside_scratch_can_be_written_nor_made_writable(sandbox: LocalSandbox, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    other_run = tmp_path / "result.json"
    other_run.write_text("another run's verdict\n")
    targets = [
        str(PROBLEMS.parent / f"kforge-escape-{tag}"),  # the project
        str(other_run),
        str(cache_dir() / f"kforge-escape-{tag}"),
        f"/tmp/kforge-escape-{tag}",
        f"/etc/kforge-escape-{tag}",
    ]
    try:
        result = run(sandbox, "write_files.py", TARGETS=targets)
        lines = [x for x in result.stdout_tail.splitlines() if x.startswith("WRITE")]
        assert len(lines) == len(targets) and all(": blocked" in x for x in lines), result.stdout_tail
        assert "REMOUNT / Operation not permitted" in result.stdout_tail, result.stdout_tail
        assert other_run.read_text() == "another run's verdict\n"
        assert not any(Path(t).exists() for t in targets if t != str(other_run))
        devices = re.search(r"SCRATCH written, /dev holds (.*)", result.stdout_tail)
        assert devices is not None, result.stdout_tail + result.stderr_tail
        allowed = {"null", "zero", "full", "random", "urandom", "tty", "shm", "fd", "stdin", "stdout", "stderr"}
        assert set(devices.group(1).split()) <= allowed, devices.group(1)  # no disk, no other host device
    finally:
        for t in targets:
            if t != str(other_run):
                Path(t).unlink(missing_ok=True)


def test_a_listener_on_the_host_s_loopback_is_out_of_reach(sandbox: LocalSandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.5)
        result = run(sandbox, "connect_loopback.py", PORT=listener.getsockname()[1])
        with pytest.raises(TimeoutError):
            listener.accept()
    assert "LOOPBACK blocked" in result.stdout_tail, result.stdout_tail


def test_a_host_process_cannot_be_signalled_nor_seen(sandbox: LocalSandbox) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        result = run(sandbox, "signal_host.py", PID=victim.pid)
        time.sleep(0.2)
        assert victim.poll() is None, "the job killed a host process"
    finally:
        victim.kill()
        victim.wait()
    assert "SIGNAL host process out of reach" in result.stdout_tail, result.stdout_tail
    seen = re.search(r"SEEN (\d+) processes", result.stdout_tail)
    assert seen is not None and int(seen.group(1)) < 20, result.stdout_tail  # its own few, not the host's


def test_a_daemon_dies_with_its_job(sandbox: LocalSandbox, tmp_path: Path) -> None:
    marker = tmp_path / "daemon-was-here"
    result = run(sandbox, "daemon_setsid.py", MARKER=str(marker))
    assert "DAEMON started" in result.stdout_tail, result.stdout_tail + result.stderr_tail
    time.sleep(3.0)  # the daemon would have written after 2 s
    assert not marker.exists()


def test_dev_shm_is_the_job_s_own_and_goes_with_it(sandbox: LocalSandbox) -> None:
    name = f"kforge-{uuid.uuid4().hex}"
    host = Path("/dev/shm") / name
    host.write_text("the host's\n")
    try:
        first = run(sandbox, "shm_litter.py", NAME=name)
        assert "SHM found=False" in first.stdout_tail, first.stdout_tail  # the host's file is not in its /dev/shm
        assert host.read_text() == "the host's\n"
        host.unlink()
        run(sandbox, "shm_litter.py", NAME=name)
        assert not host.exists()  # nor did its own land in the host's
    finally:
        host.unlink(missing_ok=True)


def test_a_job_the_config_leaves_uncontained_reports_no_containment() -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(prefork=False, contain=False))
    name = f"kforge-{uuid.uuid4().hex}"
    try:
        result = run(sandbox, "shm_litter.py", NAME=name)
        assert (Path("/dev/shm") / name).exists()  # the host's /dev/shm: what containment prevents
    finally:
        (Path("/dev/shm") / name).unlink(missing_ok=True)
    assert "containment" not in result.environment


LIMITED = {
    "prefork": LocalSandbox(LocalSandboxConfig(prefork=True, pids=64, memory="2g", disk="96m")),
    "subprocess": LocalSandbox(LocalSandboxConfig(prefork=False, pids=64, memory="2g", disk="96m")),
}


@pytest.mark.parametrize("way", sorted(LIMITED))
def test_a_fork_bomb_stops_at_the_job_s_process_limit(way: str) -> None:
    result = run(LIMITED[way], "fork_bomb.py")
    forked = re.search(r"FORKED (\d+), then (\w+)", result.stdout_tail)
    assert forked is not None, result.stdout_tail + result.stderr_tail
    assert 0 < int(forked.group(1)) < 64 and forked.group(2) == "BlockingIOError", forked.group(0)
    assert "tasks<=64" in result.environment.get("limits", ""), result.environment
    assert result.status == "rejected", result.reason  # it ran to the end: the limit is the job's, not its death


@pytest.mark.parametrize("way", sorted(LIMITED))
def test_memory_past_a_cpu_job_s_limit_is_refused(way: str) -> None:
    result = run(LIMITED[way], "memory_hog.py")
    held = re.search(r"MEMORY held (\d+) MiB, then (.+)", result.stdout_tail)
    assert held is not None, result.stdout_tail + result.stderr_tail
    assert held.group(2) == "out of memory" and 0 < int(held.group(1)) < 2048, held.group(0)
    assert "data<=2.0GiB" in result.environment.get("limits", ""), result.environment


@pytest.mark.parametrize("way", sorted(LIMITED))
def test_writes_past_a_job_s_disk_limit_fail_and_leave_the_host_s_disk_alone(way: str) -> None:
    before = shutil.disk_usage(tempfile.gettempdir()).free
    result = run(LIMITED[way], "disk_filler.py")
    filled = re.search(r"DISK wrote (\d+) MiB, then (.+)", result.stdout_tail)
    grown = re.search(r"FILE grew to (\d+) MiB, then (.+)", result.stdout_tail)
    assert filled is not None and grown is not None, result.stdout_tail + result.stderr_tail
    assert filled.group(2) == "No space left on device" and 0 < int(filled.group(1)) <= 96, filled.group(0)
    assert grown.group(2) in ("File too large", "No space left on device") and int(grown.group(1)) <= 96, grown.group(0)
    assert "scratch<=0.1GiB" in result.environment.get("limits", ""), result.environment
    assert result.status == "rejected", result.reason  # it ran to the end, and the watch saw it write files
    assert shutil.disk_usage(tempfile.gettempdir()).free > before - (64 << 20)  # its 96 MiB went nowhere on the host


@pytest.mark.skipif(os.geteuid() != 0, reason="a job started by another user runs as that user: it reads its own")
def test_a_job_started_by_root_reads_only_what_any_user_may(sandbox: LocalSandbox) -> None:
    # Not under pytest's tmp_path, whose parent is closed to others: only each file's mode or its folder's keeps it.
    folder = Path(tempfile.mkdtemp(prefix="kforge-test-read-"))
    try:
        folder.chmod(0o755)
        closed = folder / "closed"
        closed.mkdir(mode=0o700)
        behind = closed / "readable-by-mode.txt"
        behind.write_text("behind a closed folder\n")
        behind.chmod(0o644)
        private = folder / "private.txt"
        private.write_text("the user's own\n")
        private.chmod(0o600)
        result = run(sandbox, "read_private.py", TARGETS=[str(behind), str(private)])
    finally:
        shutil.rmtree(folder)
    lines = [x for x in result.stdout_tail.splitlines() if x.startswith("READ")]
    assert len(lines) == 2 and all(": blocked (Permission denied)" in x for x in lines), result.stdout_tail
    assert f"USER {contain.NOBODY}" in result.stdout_tail, result.stdout_tail
    # The interpreter's top folder: where it is closed to others (/root on this project's machines), the job sees
    # only the way to it.
    listed = re.search(r"LISTED (\S+): (.*)", result.stdout_tail)
    assert listed is not None, result.stdout_tail + result.stderr_tail
    top = Path(listed.group(1))
    if not top.stat().st_mode & 0o001:
        assert len(listed.group(2).split()) < len(os.listdir(top)), listed.group(0)


def test_doctor_says_what_a_candidate_s_job_gets_here() -> None:
    from graphs.cli import _containment_status

    line = _containment_status()
    assert line.startswith(f"local CPU jobs get their own {contain.NAMESPACES} namespaces"), line
    assert "unprivileged" in line and "within pids and memory limits" in line, line
