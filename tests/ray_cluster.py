"""A Ray cluster on loopback for tests and benchmarks: a head that runs no jobs and one-CPU worker nodes.

Each node is a ``ray start --block`` in a session of its own, so a caller can kill one node whole (a machine
lost mid-batch) and the teardown can end exactly the processes it started. Used by tests/test_ray.py, the
sandbox contract suite and bench/ray_throughput.py.
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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 120
KILL_WAIT_S = 10.0  # for the processes of a SIGKILLed node to be gone


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_members(session: int) -> list[int]:
    """Live (not zombie) processes whose session id is ``session``."""
    members = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            # Fields after the parenthesised command: state, ppid, pgrp, session, ...
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session and fields[0] != "Z":
                members.append(int(pid))
    return members


class LocalRayCluster:
    """A head (``--num-cpus 0``: it places no job) and ``workers`` one-CPU nodes on 127.0.0.1.

    ``start`` also connects this process to it as the driver. Node ``workerN`` carries the custom
    resource ``kforge_test_workerN`` (to find its Ray node id) and its jobs' scratch folders live in
    ``jobs-workerN`` (to find its job workers' processes).
    """

    def __init__(self, workers: int = 2) -> None:
        # Short: Ray's unix socket paths live under it and have a length limit.
        self.root = Path(tempfile.mkdtemp(prefix="kfray-", dir="/tmp"))
        self.port = free_port()
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
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
        ]
        self._start("head", head)
        self._wait_for_head()
        ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
        for i in range(self.n_workers):
            self.add_worker(f"worker{i}")

    def add_worker(self, name: str, gpus: int = 0) -> None:
        """Start a one-CPU worker node offering Ray ``gpus`` GPUs, and wait until it is up; once more if it
        fails to start.

        One at a time: on a loaded two-core machine a raylet can miss Ray's fixed 30 s registration
        window when several start together.
        """
        args = [
            f"--address={self.address}",
            "--num-cpus=1",
            f"--num-gpus={gpus}",
            f"--resources={json.dumps({f'kforge_test_{name}': 1})}",
            f"--dashboard-agent-listen-port={free_port()}",
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
        """SIGKILL every process of a node's session: its raylet, agents and Ray workers, as a lost machine.

        Not just its process group: the raylet starts each Ray worker in a process group of its own
        (same session), and a worker left alive notices its raylet's death only after a while.
        """
        session = self.nodes[name].pid  # `ray start` leads its own session (start_new_session)
        # Until none is left (a killed process stays live until the kernel has run its exit, and one may fork
        # while the others are being killed), for at most KILL_WAIT_S.
        deadline = time.monotonic() + KILL_WAIT_S
        while (members := _session_members(session)) and time.monotonic() < deadline:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
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
