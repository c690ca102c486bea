"""The Ray backend on a real Ray cluster on loopback: a head that runs no jobs and two worker nodes.

Each node is a ``ray start --block`` in a session of its own, so a test can kill one node
whole (a machine lost mid-batch) and the teardown can end exactly the processes it started. The
contract suite (tests/test_sandbox_contract.py) runs against the same kind of cluster. Where Ray
cannot start, the tests skip with the reason, unless KFORGE_REQUIRE_RAY is set (as `.ci/run` does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.config import RaySandboxConfig
from tests.conftest import CANDIDATES, PROBLEMS
from tests.ray_cluster import LocalRayCluster, free_port, ray_cluster
from tools.protocol import EvalJob, TimingConfig

# One Ray cluster at a time: under pytest-xdist every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("ray")

QUICK = TimingConfig(min_trials=10, min_seconds=0.0, warmup_trials=2)


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


# CPU twin problems: each has a builtin idea and a hand-written reference candidate.
BATCH_PROBLEMS = ["softmax_small", "layernorm_small", "matmul_small", "sum_dim_small"]


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


def test_a_node_killed_mid_batch_loses_no_job_and_repeats_none(
    cluster: LocalRayCluster, kforge_cache: Path, tmp_path: Path
) -> None:
    """`kforge batch` of four CPU problems on the cluster; a worker node dies while it runs a job."""
    problems, runs, out = tmp_path / "problems", tmp_path / "runs", tmp_path / "out"
    problems.mkdir()
    for name in BATCH_PROBLEMS:
        shutil.copy(PROBLEMS / f"{name}.py", problems)
    nodes = cluster.node_ids()
    small = ["--device", "cpu", "--no-compile", "--checks", "2", "--trials", "10", "--min-seconds", "0"]
    command = [sys.executable, "-m", "graphs.cli", "batch", str(problems), *small, "--rounds", "1", "--ideas", "1"]
    command += ["--parallel", "2", "--sandbox", "ray", "--ray-address", cluster.address]
    command += ["--runs-dir", str(runs), "--out", str(out)]
    env = {**os.environ, "KFORGE_CACHE_DIR": str(kforge_cache), "KFORGE_COMMIT": "test-ray-batch"}
    batch = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        killed = _running_job(cluster, "worker1")
        cluster.kill("worker1")
        # The job's own worker is in a session of its own: it must die with its Ray worker (a job takes
        # seconds, so still alive after 2 s means it did not).
        deadline = time.monotonic() + 2
        while cluster.processes(f"{cluster.root}/jobs-worker1/") and time.monotonic() < deadline:
            time.sleep(0.1)
        left_after_kill = cluster.processes(f"{cluster.root}/jobs-worker1/")
        cluster.add_worker("worker2")  # a machine joins in its place, and takes a share of what is left
        output, _ = batch.communicate(timeout=600)
    finally:
        batch.kill()
    assert batch.returncode == 0, output[-3000:]
    assert left_after_kill == []

    rows = json.loads((out / "batch.json").read_text())["rows"]
    assert sorted(r["name"] for r in rows) == sorted(BATCH_PROBLEMS)
    for row in rows:
        assert row["status"] == "done" and row["outcome"] in ("faster", "correct, not faster"), row
    # Every job's result came back exactly once, to the run that asked for it; none was lost.
    done = [e for run in runs.glob("*/") for e in _events(run) if e.get("event") == "ray_job_done"]
    assert not [e for run in runs.glob("*/") for e in _events(run) if e.get("event") == "ray_job_lost"]
    counts = Counter(e["job_id"] for e in done)
    assert set(counts.values()) == {1}, counts
    assert len(done) >= 4 * 3  # per problem at least its baseline, a check and a timing
    # The job that was running on the killed node ran again on another, and came back once, ok.
    (rerun,) = [e for e in done if e["job_id"] == killed]
    assert rerun["node"] != nodes["worker1"] and rerun["status"] == "ok"
    assert {e["node"] for e in done} <= {nodes["worker0"], nodes["worker1"], cluster.node_ids()["worker2"]}


def _events(run: Path) -> list[dict[str, Any]]:
    file = run / "events.jsonl"
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []


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
    config = RunConfig(problem="p.py", sandbox=sandbox_config(args))
    # `kforge resume` reads run.json back: the backend and its address must survive the round trip.
    assert RunConfig.model_validate_json(config.model_dump_json()).sandbox == RaySandboxConfig(address="10.0.0.5:6379")


def test_a_cuda_job_on_a_cluster_without_a_gpu_fails_at_once(cluster: LocalRayCluster) -> None:
    from sandbox.config import RaySandboxConfig
    from sandbox.ray import RaySandbox
    from tools.errors import EnvironmentProblem

    job = eval_job("softmax_small", "softmax_cpu").model_copy(update={"device": "cuda"})
    with pytest.raises(EnvironmentProblem, match="no node of the Ray cluster has a GPU"):
        RaySandbox(RaySandboxConfig(address=cluster.address)).run(job)


def test_a_driver_without_a_gpu_asks_the_cluster_for_one(cluster: LocalRayCluster, kforge_cache: Path) -> None:
    from tests.test_cli import kforge

    # This machine has no GPU either: the error names the cluster, so the check was the cluster's.
    args = ["eval", "softmax_small", str(CANDIDATES / "softmax_cpu.py"), "--device", "cuda", "--sandbox", "ray"]
    proc = kforge(kforge_cache, *args, "--ray-address", cluster.address)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"no node of the Ray cluster at {cluster.address} has a GPU" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_auto_picks_the_clusters_device_and_its_memory(cluster: LocalRayCluster) -> None:
    from sandbox.backends import job_machine
    from sandbox.config import RaySandboxConfig

    device, memory = job_machine(RaySandboxConfig(address=cluster.address), "auto")
    assert device == "cpu" and memory > 0  # the workers offer CPUs and memory, no GPU


def test_a_node_offering_a_gpu_its_tasks_cannot_see_is_one_clear_error(cluster: LocalRayCluster) -> None:
    from sandbox.ray import cluster_machine
    from tools.errors import EnvironmentProblem

    # `ray start --num-gpus=1` on a machine without one: Ray believes it, CUDA does not.
    cluster.add_worker("gpu0", gpus=1)
    try:
        config = RaySandboxConfig(address=cluster.address, cpus_per_job=1)
        with pytest.raises(EnvironmentProblem, match="offers a GPU, but a task given it sees none"):
            cluster_machine(config, "cuda", probe_timeout_s=120)
    finally:
        cluster.kill("gpu0")


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
    said = [line for line in proc.stderr.strip().splitlines() if "waiting for the job" not in line]  # its progress
    assert said == [
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
        _probe(f"127.0.0.1:{free_port()}")
    assert time.monotonic() - started < 6
