"""The Ray backend on a real Ray cluster on loopback: a head that runs no jobs and two worker nodes.

Each node is a ``ray start --block`` in a process group of its own, so a test can kill one node
whole (a machine lost mid-batch) and the teardown can end exactly the processes it started. The
contract suite (tests/test_sandbox_contract.py) runs against the same kind of cluster. Where Ray
cannot start, the tests skip with the reason, unless KFORGE_REQUIRE_RAY is set (as `.ci/run` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.protocol import EvalJob, JobResult, TimingConfig
from tests.conftest import CANDIDATES, PROBLEMS

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 120
QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayCluster:
    """A head (``--num-cpus 0``: it places no job) and ``workers`` one-CPU nodes on 127.0.0.1.

    ``start`` also connects this process to it as the driver. Node ``workerN`` carries the custom
    resource ``kforge_test_workerN`` (to find its Ray node id) and its jobs' scratch folders live in
    ``jobs-workerN`` (to find its job workers' processes).
    """

    def __init__(self, workers: int = 2) -> None:
        # Short: Ray's unix socket paths live under it and have a length limit.
        self.root = Path(tempfile.mkdtemp(prefix="kfray-", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.n_workers = workers
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        jobs = self.root / f"jobs-{name}"
        jobs.mkdir(exist_ok=True)
        log = (self.root / f"{name}.log").open("ab")
        self.nodes[name] = subprocess.Popen(
            [str(RAY), "start", "--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats", *args],
            # A key in the node's own environment: the allow-list must keep it from the job's worker there
            # (the contract suite's API-key case sets keys only in this driver, which never reach a node).
            env={**os.environ, "TMPDIR": str(jobs), "RAY_USAGE_STATS_ENABLED": "0", "OPENAI_API_KEY": "sk-secret-node"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.nodes[name]

    def start(self) -> None:
        import ray

        head = [
            "--head",
            f"--port={self.port}",
            "--num-cpus=0",
            "--num-gpus=0",
            f"--temp-dir={self.root / 'ray'}",
            "--include-dashboard=false",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
        ]
        self._start("head", head)
        self._wait_for_head()
        ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
        for i in range(self.n_workers):
            self.add_worker(f"worker{i}")

    def add_worker(self, name: str) -> None:
        """Start a one-CPU worker node and wait until it is up; once more if it fails to start.

        One at a time: on a loaded two-core machine a raylet can miss Ray's fixed 30 s registration
        window when several start together.
        """
        args = [
            f"--address={self.address}",
            "--num-cpus=1",
            "--num-gpus=0",
            f"--resources={json.dumps({f'kforge_test_{name}': 1})}",
            f"--dashboard-agent-listen-port={_free_port()}",
        ]
        for attempt in (1, 2):
            proc = self._start(name, args)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                if name in self.node_ids():
                    return
                time.sleep(0.5)
            self.kill(name)
            if attempt == 2:
                raise RuntimeError(f"Ray node {name} did not start: {self.log_tail(name)}")

    def _wait_for_head(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.nodes["head"].poll() is not None:
                raise RuntimeError(f"the Ray head exited: {self.log_tail('head')}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Ray head did not listen within {START_TIMEOUT_S} s: {self.log_tail('head')}")

    def node_ids(self) -> dict[str, str]:
        """The Ray node id of each live worker node, by name (worker0, ...)."""
        import ray

        return {
            key.removeprefix("kforge_test_"): node["NodeID"]
            for node in ray.nodes()
            if node["Alive"]
            for key in node["Resources"]
            if key.startswith("kforge_test_")
        }

    def log_tail(self, name: str) -> str:
        return (self.root / f"{name}.log").read_bytes()[-2000:].decode(errors="replace")

    def kill(self, name: str) -> None:
        """SIGKILL a node's whole process group: its raylet, agents and Ray workers, all at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.nodes[name].pid, signal.SIGKILL)
        self.nodes[name].wait()

    def stop(self) -> None:
        """SIGKILL every node: a test cluster holds nothing worth a graceful stop."""
        for name in list(self.nodes):
            self.kill(name)
        self.nodes.clear()

    def processes(self, marker: str | None = None) -> list[str]:
        """Live processes of this cluster: any that names its folder (or ``marker``) or kept it in its env."""
        needle = (marker or str(self.root)).encode()
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                ours = needle in cmdline or needle in environ
                if ours and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text():
                    found.append(f"{pid}: {cmdline.decode(errors='replace')[:200]}")
        return found


@contextlib.contextmanager
def ray_cluster(workers: int = 2) -> Iterator[LocalRayCluster]:
    """A started cluster, this process its driver, for a module-scoped fixture; skip if it cannot start."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'kernelforge[ray]'")
    import ray

    cluster = LocalRayCluster(workers)
    try:
        try:
            cluster.start()
        except (RuntimeError, ConnectionError) as exc:
            if os.environ.get("KFORGE_REQUIRE_RAY"):
                pytest.fail(f"KFORGE_REQUIRE_RAY is set but a local Ray cluster cannot start: {exc}")
            pytest.skip(f"a local Ray cluster cannot start here: {exc}")
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
        left = cluster.processes()
        if not left:
            shutil.rmtree(cluster.root, ignore_errors=True)
        assert not left, f"Ray cluster processes left behind: {left}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with ray_cluster() as started:
        yield started


def eval_job(problem: str, candidate: str) -> EvalJob:
    return EvalJob(
        problem_name=f"{problem}.py",
        problem_source=(PROBLEMS / f"{problem}.py").read_text(),
        candidate_name=f"{candidate}.py",
        candidate_source=(CANDIDATES / f"{candidate}.py").read_text(),
        device="cpu",
        references=["eager"],
        timing=QUICK,
        time_candidate=False,
        timeout_s=120,
    )


def check(result: JobResult) -> None:
    assert result.status == "ok", f"{result.status}: {result.reason}\n{result.details}\n{result.stderr_tail}"
    assert result.correctness is not None and result.correctness.passed
    assert len(result.correctness.checks) == 5


# Real CPU jobs: the CPU twin problems with their hand-written reference candidates.
BATCH = [
    ("softmax_small", "softmax_cpu"),
    ("layernorm_small", "layernorm_cpu"),
    ("matmul_small", "matmul_cpu"),
    ("softmax_small", "softmax_cpu"),
]


def _running_job(cluster: LocalRayCluster, node: str, timeout_s: float = 120) -> str:
    """The id of a job whose worker is running on ``node``, as soon as there is one."""
    marker = f"{cluster.root}/jobs-{node}/kforge-"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in cluster.processes(marker):
            if "sandbox.worker" in line:
                return line.split(marker, 1)[1].split("-", 1)[0]
        time.sleep(0.1)
    raise AssertionError(f"no job started on {node} within {timeout_s} s")


def test_a_node_killed_mid_batch_loses_no_job_and_repeats_none(cluster: LocalRayCluster) -> None:
    from sandbox.config import RaySandboxConfig
    from sandbox.ray import RaySandbox

    nodes = cluster.node_ids()
    jobs = [eval_job(problem, candidate) for problem, candidate in BATCH]
    sandbox = RaySandbox(RaySandboxConfig(address=cluster.address))
    killed: list[str] = []
    left_after_kill: list[list[str]] = []

    def kill_worker1() -> None:
        killed.append(_running_job(cluster, "worker1"))
        cluster.kill("worker1")
        # The job's own worker is in a session of its own, outside the node's process group: it must
        # die with its Ray worker (a job takes seconds, so still alive after 2 s means it did not).
        deadline = time.monotonic() + 2
        while cluster.processes(f"{cluster.root}/jobs-worker1/") and time.monotonic() < deadline:
            time.sleep(0.1)
        left_after_kill.append(cluster.processes(f"{cluster.root}/jobs-worker1/"))

    killer = threading.Thread(target=kill_worker1)
    killer.start()
    results = list(sandbox.run_many(jobs))
    killer.join()

    assert killed, "worker1 was never killed"
    counts = Counter(r.job_id for r in results)
    assert counts == Counter(job.job_id for job in jobs), counts  # each job once, none twice, none lost
    for result in results:
        check(result)
    # The job that was running on the killed node ran again on the one left, and came back once.
    (rerun,) = [r for r in results if r.job_id == killed[0]]
    assert rerun.environment["ray_node"] == nodes["worker0"]
    # Its first worker died with the node (it would otherwise have run on, reporting to no one).
    assert left_after_kill == [[]], left_after_kill


def test_kforge_eval_runs_on_the_cluster(cluster: LocalRayCluster, kforge_cache: Path) -> None:
    from tests.test_cli import FAST, as_json, kforge

    candidate = str(CANDIDATES / "softmax_cpu.py")
    args = ["eval", "softmax_small", candidate, *FAST, "--checks", "1", "--sandbox", "ray"]
    proc = kforge(kforge_cache, *args, "--ray-address", cluster.address, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert as_json(proc)["result"]["environment"]["ray_node"] in cluster.node_ids().values()


def test_kforge_run_takes_the_ray_backend_into_its_saved_config() -> None:
    from graphs.cli import build_parser, sandbox_config
    from graphs.config import RunConfig
    from sandbox.config import RaySandboxConfig

    args = build_parser().parse_args(["run", "softmax_small", "--sandbox", "ray", "--ray-address", "10.0.0.5:6379"])
    config = RunConfig(problem="p.py", sandbox=sandbox_config(args.sandbox, args.ray_address))
    # `kforge resume` reads run.json back: the backend and its address must survive the round trip.
    assert RunConfig.model_validate_json(config.model_dump_json()).sandbox == RaySandboxConfig(address="10.0.0.5:6379")


def test_a_cuda_job_on_a_cluster_without_a_gpu_fails_at_once(cluster: LocalRayCluster) -> None:
    from sandbox.config import RaySandboxConfig
    from sandbox.ray import RaySandbox
    from tools.errors import EnvironmentProblem

    job = eval_job("softmax_small", "softmax_cpu").model_copy(update={"device": "cuda"})
    with pytest.raises(EnvironmentProblem, match="no node of the Ray cluster has a GPU"):
        RaySandbox(RaySandboxConfig(address=cluster.address)).run(job)


NO_RAY = """
import sys
sys.modules["ray"] = None  # `import ray` now fails as it does where Ray is not installed
from graphs.cli import main
code = main(sys.argv[1:] + ["--sandbox", "local"])
assert code == 0, code
sys.exit(main(sys.argv[1:] + ["--sandbox", "ray"]))
"""


def test_without_ray_the_local_backend_works_and_ray_is_one_clear_line(kforge_cache: Path) -> None:
    from tests.test_cli import FAST

    args = ["eval", "softmax_small", str(CANDIDATES / "softmax_cpu.py"), *FAST, "--checks", "1"]
    env = {**os.environ, "KFORGE_CACHE_DIR": str(kforge_cache)}
    proc = subprocess.run(
        [sys.executable, "-c", NO_RAY, *args], cwd=PROBLEMS.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "verdict      ok" in proc.stdout  # the local run, before
    assert proc.stderr.strip().splitlines() == [
        "kforge: error: the ray sandbox needs Ray (import of ray halted; None in sys.modules): "
        "pip install 'kernelforge[ray]'"
    ]


def test_nothing_listening_at_the_address_fails_in_seconds() -> None:
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'kernelforge[ray]'")
    from sandbox.ray import _probe
    from tools.errors import EnvironmentProblem

    # ray.init itself would retry such an address for minutes; RaySandbox probes it first.
    started = time.monotonic()
    with pytest.raises(EnvironmentProblem, match=r"no Ray cluster answers at 127\.0\.0\.1:\d+: "):
        _probe(f"127.0.0.1:{_free_port()}")
    assert time.monotonic() - started < 6
