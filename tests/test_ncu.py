"""Nsight Compute profiles: reading ncu's CSV, the job's rules, and the paths that need no GPU, for real.

The CSV texts below are written in the layout of ``ncu --csv --page raw --print-units base`` (a header
row, a units row, a row per kernel launch, ncu's own ``==PROF==`` lines around them). The GPU half, ncu
profiling real kernels through the sandbox, is in tests/test_gpu.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from sandbox.config import LocalSandboxConfig
from sandbox.local import LocalSandbox
from tests.conftest import FIXTURES, PROBLEMS
from tools import ncu
from tools.ncu import METRICS, ContenderProfile, KernelProfile, NcuError, ProfileReport
from tools.protocol import ProfileJob

ORDER = [
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__time_duration.sum",
    "launch__block_size",
    "launch__grid_size",
    "launch__registers_per_thread",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
]
FIXED = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Device", "CC"]


def _csv(rows: list[list[str]], units: list[str], columns: list[str] = ORDER) -> str:
    quote = lambda cells: ",".join(f'"{c}"' for c in cells)  # noqa: E731
    lines = ["==PROF== Connected to process 4242 (/usr/bin/python3.12)", quote(FIXED + columns)]
    lines.append(quote([""] * len(FIXED) + units))
    for i, row in enumerate(rows):
        lines.append(quote([str(i), "4242", "python3.12", "127.0.0.1", row[0], "1", "7", "0", "9.0", *row[1:]]))
    lines.append("==PROF== Disconnected from process 4242")
    return "\n".join(lines) + "\n"


BASE_UNITS = ["byte", "byte", "%", "nsecond", "", "", "register/thread", "%", "%"]
TWO_KERNELS = _csv(
    [
        ["softmax_rows(float const*, float*, int)", "268,435,456", "268,435,456", "92.1", "131,072", "128", "65536",
         "40", "21.5", "88.0"],
        ["void at::native::vectorized_elementwise_kernel<4>(int, float*)", "1024", "0", "3.2", "2,048", "256", "1",
         "16", "0.4", "12.5"],
    ],
    BASE_UNITS,
)  # fmt: skip


def test_raw_csv_reads_every_launch_and_its_metrics() -> None:
    first, second = ncu.parse_csv(TWO_KERNELS)
    assert first.name == "softmax_rows(float const*, float*, int)"
    assert (first.grid, first.block, first.registers) == (65536, 128, 40)
    assert first.duration_ns == 131_072
    assert first.dram_read_bytes == first.dram_write_bytes == 268_435_456
    assert (first.sm_pct, first.memory_pct, first.occupancy_pct) == (21.5, 92.1, 88.0)
    assert second.name.startswith("void at::native::vectorized_elementwise_kernel<4>")
    assert second.dram_bytes == 1024 and second.grid == 1


def test_the_details_layout_a_row_per_metric_reads_the_same() -> None:
    # ncu's default page: "Section Name","Metric Name","Metric Unit","Metric Value" after the launch's columns.
    assert ncu.parse_csv(_long_csv(TWO_KERNELS)) == ncu.parse_csv(TWO_KERNELS)


def _long_csv(wide: str) -> str:
    """The same launches in the details layout."""
    rows = list(csv.reader(line for line in wide.splitlines() if not line.startswith("==")))
    header, units, launches = rows[0], rows[1], rows[2:]
    out = [[*FIXED, "Section Name", "Metric Name", "Metric Unit", "Metric Value"]]
    for launch in launches:
        for i in range(len(FIXED), len(header)):
            out.append([*launch[: len(FIXED)], "Command line profiler metrics", header[i], units[i], launch[i]])
    return "\n".join(",".join(f'"{c}"' for c in row) for row in out)


def test_scaled_units_become_base_units() -> None:
    # What --print-units auto would print: the parser must not take microseconds for nanoseconds.
    units = ["Mbyte", "Kbyte", "%", "usecond", "", "", "register/thread", "%", "%"]
    text = _csv([["k", "268.44", "1.5", "90", "131.07", "128", "512", "32", "20", "80"]], units)
    (k,) = ncu.parse_csv(text)
    assert k.dram_read_bytes == pytest.approx(268.44e6)
    assert k.dram_write_bytes == pytest.approx(1500)
    assert k.duration_ns == pytest.approx(131_070)


def test_a_metric_this_ncu_did_not_collect_is_named() -> None:
    text = _csv([["k", "1", "1", "1", "1", "1", "1", "1", "1"]], BASE_UNITS[:-1], ORDER[:-1])
    with pytest.raises(NcuError, match="sm__warps_active"):
        ncu.parse_csv(text)


def test_no_kernels_and_no_table() -> None:
    assert ncu.parse_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n") == []
    with pytest.raises(NcuError, match=r"no CSV table.*Segmentation fault"):
        ncu.parse_csv("==PROF== Connected to process 1\nSegmentation fault\n")


def test_failure_reasons_are_one_line() -> None:
    log = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    reason = ncu.failure_reason(log + "\n", 1)
    assert "CAP_SYS_ADMIN" in reason and "\n" not in reason
    assert ncu.failure_reason("line one\n==ERROR== the application returned an error code (1)\n", 9) == (
        "ncu exited with 9: ==ERROR== the application returned an error code (1)"
    )


def test_the_command_profiles_only_the_opened_range_with_every_metric() -> None:
    argv = ncu.command("/opt/ncu", "/tmp/log.csv", ["python3", "-m", "sandbox.profile_target"])
    assert argv[0] == "/opt/ncu" and argv[-3:] == ["python3", "-m", "sandbox.profile_target"]
    assert "--csv" in argv
    options = [a for a in argv[1:-3] if a != "--csv"]
    pairs = dict(zip(options[::2], options[1::2], strict=True))
    assert pairs["--profile-from-start"] == "off"
    assert pairs["--target-processes"] == "all"  # the profiled call runs in a child of what ncu starts
    assert pairs["--page"] == "raw" and pairs["--print-units"] == "base" and pairs["--log-file"] == "/tmp/log.csv"
    assert set(pairs["--metrics"].split(",")) == set(METRICS.values())


def test_an_explicit_ncu_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NcuError, match="no such executable"):
        ncu.find_ncu(str(tmp_path / "ncu"))


def test_traffic_is_compared_with_the_problem_bytes() -> None:
    kernels = ncu.parse_csv(TWO_KERNELS)
    report = ProfileReport(
        ncu="Version 2025.3",
        metrics=list(METRICS.values()),
        problem_bytes=536_870_912,
        contenders={"candidate": ContenderProfile(contender="candidate", kernels=kernels)},
    )
    assert report.traffic_ratio("candidate") == pytest.approx((536_870_912 + 1024) / 536_870_912)
    assert report.traffic_ratio("eager") is None
    assert report.contenders["candidate"].duration_ns == 131_072 + 2_048
    assert json.loads(report.model_dump_json())["contenders"]["candidate"]["kernels"][1]["grid"] == 1


def test_a_profile_job_names_what_it_profiles() -> None:
    source = (PROBLEMS / "softmax_small.py").read_text()
    with pytest.raises(ValueError, match="needs its source"):
        ProfileJob(problem_name="p.py", problem_source=source)
    with pytest.raises(ValueError, match="named twice"):
        ProfileJob(problem_name="p.py", problem_source=source, contenders=["eager", "eager"])
    assert ProfileJob(problem_name="p.py", problem_source=source, contenders=["eager"]).timed


@pytest.mark.skipif(torch.cuda.is_available(), reason="the worker's answer where no GPU is visible")
def test_the_worker_says_in_one_line_that_profiling_needs_a_gpu() -> None:
    # Without device turns the local backend hands the job to a real worker, which finds no GPU.
    sandbox = LocalSandbox(LocalSandboxConfig(device_turns=False))
    job = ProfileJob(
        problem_name="softmax_small.py",
        problem_source=(PROBLEMS / "softmax_small.py").read_text(),
        contenders=["eager"],
    )
    result = sandbox.run(job)
    assert (result.status, result.reason) == (
        "runtime_error",
        "profiling needs a CUDA device: none is visible to the worker",
    )
    assert result.profile is None


def test_kernel_profiles_sum_what_is_known() -> None:
    k = KernelProfile(name="k", dram_read_bytes=10.0)
    assert k.dram_bytes == 10.0
    c = ContenderProfile(contender="eager", kernels=[k])
    assert c.duration_ns == 0 and c.dram_bytes_per_s is None


def test_profile_command_errors_are_one_line(kforge_cache: Path) -> None:
    from tests.test_cli import kforge

    cheat = FIXTURES / "cheats" / "thread_background.py"
    line = next(i for i, text in enumerate(cheat.read_text().splitlines(), 1) if text.rstrip().endswith("# cheat"))
    cases = [
        ((), 2, "give a problem (and a candidate file), or --run RUN"),
        (("softmax_small", "--contenders", "eager,bogus"), 2, "--contenders 'eager,bogus': name some of eager"),
        (("softmax_small", "--contenders", "candidate"), 2, "--contenders names the candidate, but no candidate"),
        (("softmax_small", "--candidate", "c1-0"), 2, "--candidate ID names a run's candidate: use it with --run"),
        (("softmax_small", str(cheat)), 2, f"{cheat}: the static anti-cheat checks reject it (thread at line {line}"),
        (("softmax_small", "--warmup", "0"), 2, "--warmup must be at least 1"),
    ]
    if not torch.cuda.is_available():
        cases.append((("softmax_small",), 3, "profiling needs a CUDA GPU, and none is visible here"))
    for args, code, message in cases:
        out = kforge(kforge_cache, "profile", *args)
        assert out.returncode == code, (args, out.stderr)
        assert out.stderr.startswith(f"kforge: error: {message}") and out.stderr.count("\n") == 1, out.stderr


def test_the_profiled_process_builds_each_contender_on_the_jobs_inputs() -> None:
    from sandbox.profile_target import contender_model
    from tests.conftest import CANDIDATES

    job = ProfileJob(
        problem_name="layernorm_small.py",
        problem_source=(PROBLEMS / "layernorm_small.py").read_text(),
        candidate_source=(CANDIDATES / "layernorm_cpu.py").read_text(),
        seed=3,
    )
    cpu = torch.device("cpu")
    eager, inputs = contender_model(job, "eager", cpu)
    candidate, same_inputs = contender_model(job, "candidate", cpu)
    assert all(torch.equal(a, b) for a, b in zip(inputs, same_inputs, strict=True))  # seeded alike
    with torch.no_grad():
        torch.testing.assert_close(candidate(*inputs), eager(*inputs), atol=1e-4, rtol=1e-4)


def test_the_summary_a_planner_reads() -> None:
    report = ProfileReport(
        ncu="Version 2025.3",
        metrics=list(METRICS.values()),
        problem_bytes=536_870_912,
        contenders={"candidate": ContenderProfile(contender="candidate", kernels=ncu.parse_csv(TWO_KERNELS))},
    )
    assert report.summary("candidate") == (
        "2 kernel(s), 133.1 µs, DRAM 1.00× the problem's bytes at 4.03 TB/s; "
        "longest kernel softmax_rows: memory 92%, SM 22%, occupancy 88%"
    )


def test_ncu_in_a_run_needs_the_cuda_device(kforge_cache: Path) -> None:
    from tests.test_cli import kforge

    for command in ("run", "batch"):
        out = kforge(kforge_cache, command, str(PROBLEMS / "softmax_small.py"), "--device", "cpu", "--ncu")
        assert (out.returncode, out.stderr) == (
            2,
            "kforge: error: --ncu: Nsight Compute profiles CUDA kernels, and this run's device is cpu\n",
        )
