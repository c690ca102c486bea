"""The sandbox contract, for real, against every backend: a fresh worker process per job, and
candidates that misbehave.

Every job runs the real worker on the CPU twin of the softmax problem: in the local backend both
ways it launches (forked from the fork server, the default, and as a new interpreter), in the
docker backend inside a locked-down container, and in the Ray backend as tasks on a real local Ray
cluster (a head and two worker nodes on loopback, started once for this module). The docker backend's
tests skip where no Docker engine or sandbox image is available (`kforge sandbox build` makes the
image), unless KFORGE_REQUIRE_DOCKER is set, as `.ci/run` does: then they fail; likewise the Ray
backend's where Ray cannot start, unless KFORGE_REQUIRE_RAY is set. Some containment needs the
container (network, files outside scratch, a fork bomb, host memory): those cases run against the
docker backend only.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sandbox.config import DockerSandboxConfig, LocalSandboxConfig, Sandbox
from sandbox.local import LocalSandbox
from tests.conftest import CANDIDATES, FIXTURES, PROBLEMS
from tools.protocol import EvalJob, JobResult, ProfileJob, TimingConfig
from tools.timing import CpuTimer

HOSTILE = FIXTURES / "hostile"
QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)
SANDBOXES: dict[str, Sandbox] = {
    "prefork": LocalSandbox(LocalSandboxConfig(prefork=True)),
    "subprocess": LocalSandbox(LocalSandboxConfig(prefork=False)),
}
# Small limits, so that the memory and fork-bomb cases end quickly on a CI machine.
DOCKER_CONFIG = DockerSandboxConfig(memory="3g", pids=256, tmpfs_size="1g")


def _docker() -> Sandbox | str:
    """The docker backend, or why it cannot run here."""
    from tools.errors import EnvironmentProblem

    try:
        from sandbox.docker import DockerSandbox

        return DockerSandbox(DOCKER_CONFIG)
    except EnvironmentProblem as exc:
        return str(exc)


_DOCKER: Sandbox | str | None = None


def docker_sandbox() -> Sandbox:
    global _DOCKER
    if _DOCKER is None:
        _DOCKER = _docker()
    if isinstance(_DOCKER, str):
        if os.environ.get("KFORGE_REQUIRE_DOCKER"):
            pytest.fail(f"KFORGE_REQUIRE_DOCKER is set but the docker backend cannot run: {_DOCKER}")
        pytest.skip(f"docker backend unavailable: {_DOCKER}")
    return _DOCKER


@pytest.fixture(scope="module")
def ray_sandbox() -> Iterator[Sandbox]:
    from tests.ray_cluster import ray_cluster

    with ray_cluster() as cluster:
        from sandbox.config import RaySandboxConfig
        from sandbox.ray import RaySandbox

        yield RaySandbox(RaySandboxConfig(address=cluster.address))


@pytest.fixture(params=[*sorted(SANDBOXES), "docker", "ray"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    if request.param == "ray":
        return request.getfixturevalue("ray_sandbox")
    return docker_sandbox() if request.param == "docker" else SANDBOXES[request.param]


@pytest.fixture
def docker() -> Sandbox:
    return docker_sandbox()


def printed(result: JobResult) -> str:
    """What the candidate printed: stdout for the local backend; the docker backend sends it to stderr."""
    return result.stdout_tail + result.stderr_tail


def run(
    sandbox: Sandbox, candidate: Path | None, *, timeout_s: float = 60, time_it: bool = False, **kw: object
) -> JobResult:
    job = EvalJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        candidate_name=candidate.name if candidate else "candidate.py",
        candidate_source=candidate.read_text() if candidate else None,
        device="cpu",
        references=["eager"],
        timing=QUICK,
        time_candidate=time_it,
        timeout_s=timeout_s,
        **kw,  # type: ignore[arg-type]
    )
    return sandbox.run(job)


def test_correct_cpu_candidate_is_ok_and_timed(sandbox: Sandbox) -> None:
    result = run(sandbox, CANDIDATES / "softmax_cpu.py", time_it=True)
    assert result.status == "ok", result.reason + result.details
    assert result.correctness is not None and len(result.correctness.checks) == 5
    assert all(c.passed for c in result.correctness.checks)
    assert len({c.seed for c in result.correctness.checks}) == 5  # fresh inputs for every check
    assert result.timing is not None and set(result.timing.stats) == {"eager", "candidate"}
    assert result.timing.stats["candidate"].trials >= 10
    assert result.timing.input_sets >= 2
    assert result.exit_code == 0


def test_wrong_candidate_is_incorrect(sandbox: Sandbox) -> None:
    result = run(sandbox, FIXTURES / "candidates" / "wrong_softmax_cpu.py")
    assert result.status == "incorrect"
    assert "outside atol=0.01" in result.reason


def test_c_compile_error_is_compile_error(sandbox: Sandbox) -> None:
    result = run(sandbox, FIXTURES / "candidates" / "syntax_error_cpu.py")
    assert result.status == "compile_error", result.reason
    assert "line" in result.reason


def test_nan_never_passes(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "nan_output.py")
    assert result.status == "incorrect"
    assert "NaN" in result.reason


def test_segfault_is_crashed(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "segfault.py")
    assert result.status == "crashed"
    assert "SIGSEGV" in result.reason


def test_exit_zero_is_crashed(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "exit_zero.py")
    assert result.status == "crashed"
    # The candidate's own process ended (sandbox.runner): the judge says so, with no verdict of the candidate's
    assert "exited with code 0" in result.reason and "no verdict" in result.reason, result.reason


def test_host_hang_is_timeout(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "hang.py", timeout_s=3)
    assert result.status == "timeout"
    assert result.wall_s < 3 + 5 + 5  # limit + interpreter grace + slack


def test_exception_is_runtime_error(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "raises.py")
    assert result.status == "runtime_error"
    assert "ValueError: this kernel is not implemented" in result.reason
    # The traceback starts at the candidate's own frame: none of the harness's above it
    assert result.details.startswith("Traceback") and 'File "raises.py"' in result.details, result.details
    assert "worker.py" not in result.details and "module.py" not in result.details, result.details


def test_missing_modelnew_is_runtime_error(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "no_modelnew.py")
    assert result.status == "runtime_error"
    assert "ModelNew" in result.reason


def test_fake_verdict_on_stdout_is_not_believed(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "fake_verdict.py")
    assert result.status == "crashed"
    assert '"status": "ok"' in printed(result)  # it printed it; nobody listened


def test_forged_result_channel_is_rejected(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "forge_channel.py")
    assert result.status == "rejected"
    assert result.reason.startswith("verdict_forgery: ")
    # The candidate runs in the runner, whose one open descriptor is its answer channel to the judge: the forged
    # frame lands there, and the judge refuses it (the verdict channel is the judge's, out of its reach)
    assert "answer channel" in result.reason, result.reason


def test_api_keys_never_reach_the_candidate(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-value")
    result = run(sandbox, HOSTILE / "read_env.py")
    assert result.status == "ok", result.reason
    line = next(x for x in printed(result).splitlines() if x.startswith("ENV:"))
    # Word by word: in full CI runs the docker backend's stderr has shown NUL bytes where print()
    # wrote its separating spaces (not reproduced alone; an open question noted in RESULTS).
    words = line.replace("\x00", " ").split()
    assert words[:2] == ["ENV:", "none"], line
    assert "secret" not in printed(result)
    home = words[words.index("HOME:") + 1]
    assert home != os.environ.get("HOME") and "kforge-" in home  # a private scratch folder


def test_a_verdict_never_carries_a_held_api_key(sandbox: Sandbox) -> None:
    from tools import keys

    probe = "sk-kforge-test-redaction-probe-0123456789"  # what echo_key.py prints and raises
    leaked = run(sandbox, HOSTILE / "echo_key.py")
    assert leaked.status == "runtime_error" and probe in leaked.reason  # no key held: nothing to replace
    keys.adopt({"OPENAI_API_KEY": probe})  # as kforge holds the key it took from its environment
    result = run(sandbox, HOSTILE / "echo_key.py")
    assert result.status == "runtime_error"
    assert probe not in result.model_dump_json()
    assert "leaked [redacted]" in result.reason and "KEY [redacted]" in printed(result)


def test_children_left_behind_are_killed(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "leave_child.py")
    assert result.status == "rejected" and result.reason.startswith("thread: child process"), result.reason
    if hasattr(sandbox, "leftovers"):  # the container's own accounting
        assert sandbox.leftovers() == ([], [])  # type: ignore[attr-defined]
        return
    if result.environment.get("containment", "").startswith("pid"):
        # The pid it printed is its namespace's, not the host's; the namespace's end kills every process in it
        # (tests/test_local_containment.py: a daemon that would write after its job never does).
        return
    pid = int(re.search(r"CHILD (\d+)", printed(result)).group(1))  # type: ignore[union-attr]
    # SIGKILL lands asynchronously and zombies reaped by init linger a moment: give it 5 s to be gone.
    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + 5
    while status.exists() and "State:\tZ" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_mutating_inputs_is_incorrect(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "mutate_input.py")
    assert result.status == "rejected"
    assert result.reason.startswith("input_mutation: modified input(s) [0]")


def test_clock_patched_by_candidate_is_rejected_before_timing(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "patch_clock.py", time_it=True)
    assert result.status == "rejected", result.reason
    assert result.reason.startswith("timer_patch: time.perf_counter was replaced")
    assert result.timing is None


def test_a_captured_clock_ignores_a_patched_one() -> None:
    # Defence in depth under the rejection above: the timer keeps the clock it was built with.
    timer = CpuTimer()
    real = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0  # what patch_clock.py does
        ms = timer.time_call(lambda: time.sleep(0.002), []).ms
    finally:
        time.perf_counter = real
    assert ms >= 2.0


def test_reference_only_job_times_the_baseline(sandbox: Sandbox) -> None:
    result = run(sandbox, None, time_it=True)
    assert result.status == "ok"
    assert result.timing is not None and set(result.timing.stats) == {"eager"}
    assert result.correctness is None


@pytest.mark.parametrize("name", sorted(SANDBOXES))
def test_scratch_folder_is_removed(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile re-read TMPDIR
    run(SANDBOXES[name], CANDIDATES / "softmax_cpu.py")
    assert not list(tmp_path.glob("kforge-*"))


# ------------------------------------------------------------------ what only a container contains


def test_container_scratch_is_emptied_after_every_job(docker: Sandbox) -> None:
    result = run(docker, CANDIDATES / "softmax_cpu.py")
    assert result.status == "ok", result.reason
    assert docker.leftovers() == ([], [])  # type: ignore[attr-defined]


def _line(result: JobResult, prefix: str) -> list[str]:
    lines = [x for x in printed(result).replace("\x00", " ").splitlines() if x.startswith(prefix)]
    assert lines, printed(result)
    return lines[0].split()[1:]


def test_no_job_finds_what_the_last_one_left_in_the_container(docker: Sandbox) -> None:
    container = docker._container(None)  # type: ignore[attr-defined]
    first = run(docker, HOSTILE / "persist_between_jobs.py")
    assert first.status == "ok", first.reason
    # It left a file in /tmp and in /dev/shm, an unreadable folder, a message queue and a SysV segment.
    assert len(_line(first, "LEFT:")) == 5, printed(first)
    assert docker.leftovers() == ([], [])  # type: ignore[attr-defined]
    second = run(docker, HOSTILE / "persist_between_jobs.py")
    assert second.status == "ok", second.reason
    assert _line(second, "FOUND:") == ["none"]
    # The same container ran both jobs: emptied between them, not replaced.
    assert docker._container(None) is container  # type: ignore[attr-defined]


def test_a_container_s_memory_limit_is_sized_from_the_host() -> None:
    from sandbox.config import host_memory_bytes

    host = host_memory_bytes()
    for fraction in (0.5, 0.25):
        config = DockerSandboxConfig() if fraction == 0.5 else DockerSandboxConfig(memory_fraction=fraction)
        assert max(1 << 30, host * fraction - (1 << 20)) < config.memory_bytes() <= max(1 << 30, host * fraction)
    assert DockerSandboxConfig(memory="3g").memory_bytes() == 3 << 30
    with pytest.raises(ValueError, match="bad size"):
        DockerSandboxConfig(memory="lots")


def test_the_container_gets_the_limit_it_was_given(docker: Sandbox) -> None:
    from sandbox.docker import DockerSandbox

    limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    read_limit = (
        f"import os; p = {limit!r}; print(open(p if os.path.exists(p) else '/sys/fs/cgroup/memory.max').read())"
    )
    plain = docker._container(None)  # type: ignore[attr-defined]
    assert int(plain._run_python(read_limit)) == DOCKER_CONFIG.memory_bytes() == 3 << 30
    sized = DockerSandbox(DockerSandboxConfig(memory_fraction=0.125))
    try:
        container = sized._container(None)
        assert int(container._run_python(read_limit)) == sized.config.memory_bytes()
        assert container.container.attrs["HostConfig"]["IpcMode"] == "private"
    finally:
        sized.close()


def test_host_memory_hog_is_killed_and_the_next_job_runs(docker: Sandbox) -> None:
    result = run(docker, HOSTILE / "memory_hog.py", timeout_s=120)
    assert result.status in ("crashed", "runtime_error"), result.reason
    assert "SIGKILL" in result.reason or "out of memory" in result.reason, result.reason
    assert run(docker, CANDIDATES / "softmax_cpu.py").status == "ok"


def test_fork_bomb_hits_the_pid_limit_and_the_next_job_runs(docker: Sandbox) -> None:
    result = run(docker, HOSTILE / "fork_bomb.py", timeout_s=60)
    assert result.status in ("rejected", "runtime_error", "crashed", "timeout"), result.reason
    assert run(docker, CANDIDATES / "softmax_cpu.py").status == "ok"
    assert docker.leftovers() == ([], [])  # type: ignore[attr-defined]


def test_stdout_flood_is_cut_to_a_tail(sandbox: Sandbox) -> None:
    result = run(sandbox, HOSTILE / "stdout_flood.py")
    assert result.status == "ok", result.reason
    assert len(printed(result)) < 10_000
    assert "bytes cut" in printed(result)


def test_no_network_in_the_container(docker: Sandbox) -> None:
    result = run(docker, HOSTILE / "network.py")
    assert result.status == "ok", result.reason
    lines = [x for x in printed(result).splitlines() if x.startswith("NETWORK")]
    assert len(lines) == 2 and all(": blocked" in x for x in lines), lines


def test_nothing_outside_scratch_can_be_written(docker: Sandbox) -> None:
    result = run(docker, HOSTILE / "write_outside.py")
    assert result.status == "ok", result.reason
    lines = [x for x in printed(result).splitlines() if x.startswith("WRITE")]
    written = [x for x in lines if x.endswith(": written")]
    # /tmp is the container's own tmpfs, emptied after each job: the one place a write may land.
    assert all(x.startswith("WRITE /tmp/") for x in written), lines
    assert len(lines) == 6
    assert not Path("/etc/kforge-escape").exists() and not (PROBLEMS.parent / "escape").exists()
    assert docker.leftovers() == ([], [])  # type: ignore[attr-defined]


_STATUS = "import sys; print(*[l for l in open('/proc/self/status') if l.startswith(('Uid:', 'CapEff:'))], sep='')"
CAP_SYS_ADMIN = 1 << 21


def _uid_and_caps(container: object) -> tuple[int, int]:
    printed = container._run_python(_STATUS)  # type: ignore[attr-defined]
    lines = dict(line.split(":", 1) for line in printed.splitlines() if line)
    return int(lines["Uid"].split()[1]), int(lines["CapEff"].strip(), 16)


def test_only_a_profile_job_gets_the_profilers_privileges_in_a_container_of_its_own(docker: Sandbox) -> None:
    plain = docker._container(None)  # type: ignore[attr-defined]
    profiling = docker._start(None, profiling=True)  # type: ignore[attr-defined]
    try:
        assert _uid_and_caps(plain) == (65534, 0)
        assert _uid_and_caps(profiling) == (0, CAP_SYS_ADMIN)  # root, with CAP_SYS_ADMIN alone
    finally:
        profiling.remove()
    # A profile job's container is started for it and removed after it, whatever the job's fate.
    job = ProfileJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        contenders=["eager"],
    )

    def profile_containers() -> set[str]:
        # Profile containers only: under `make test` the other worker's docker tests start and stop their own.
        listed = docker.client.containers.list(all=True)  # type: ignore[attr-defined]
        return {c.id for c in listed if c.name.startswith("kforge-profile-")}

    before = profile_containers()
    result = docker._run_in_container(job, None)  # type: ignore[attr-defined]
    if not torch.cuda.is_available():
        assert (result.status, result.reason) == (
            "runtime_error",
            "profiling needs a CUDA device: none is visible to the worker",
        )
    assert profile_containers() <= before


def test_kforge_run_and_eval_use_the_docker_backend(docker: Sandbox, kforge_cache: Path, tmp_path: Path) -> None:
    from tests.test_cli import FAST, as_json, kforge

    proc = kforge(
        kforge_cache,
        "eval",
        "softmax_small",
        str(CANDIDATES / "softmax_cpu.py"),
        *FAST,
        "--sandbox",
        "docker",
        "--json",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert as_json(proc)["result"]["environment"]["host"] != os.uname().nodename  # it ran in the container
    args = ["--device", "cpu", "--rounds", "1", "--ideas", "1", "--no-compile", "--sandbox", "docker"]
    proc = kforge(kforge_cache, "run", "softmax_small", *args, "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = tmp_path.iterdir()
    assert '"type":"docker"' in (run_dir / "run.json").read_text().replace(" ", "")
    assert (run_dir / "report.md").exists()
