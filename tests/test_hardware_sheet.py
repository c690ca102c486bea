"""The hardware sheet the LLM roles are given: read from a real CPU job's environment, rendered for a GPU's."""

from __future__ import annotations

import torch

from agents.hardware import cache_bytes, rate, sheet, size
from tools.device import cpu_caches, hardware_facts

H100 = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "cuda": "13.0",
    "arch": "sm_90",
    "sms": "132",
    "threads_per_sm": "2048",
    "regs_per_sm": "65536",
    "smem_per_block_bytes": "232448",
    "smem_per_sm_bytes": "233472",
    "l2_bytes": "52428800",
    "memory_bytes": "85029158912",
}
CEILINGS = {"copy_bytes_per_s": 3.01e12, "fp32_flops": 5.1e13, "tf32_flops": 3.8e14, "bf16_flops": 7.2e14}


def test_sizes_and_rates_read_as_an_engineer_writes_them() -> None:
    assert [size(n) for n in (232448, 52428800, 85029158912, 512)] == ["227 KiB", "50 MiB", "79.2 GiB", "512 B"]
    assert rate(3.01e12, "B/s") == "3.01 TB/s" and rate(1.8e11, "FLOP/s") == "180 GFLOP/s"


def test_a_gpu_sheet_names_what_a_kernel_is_sized_by() -> None:
    text = sheet("cuda", {"device": H100, "ceilings": CEILINGS})
    assert text.splitlines()[0] == "Target device: cuda, an NVIDIA H100 80GB HBM3 (sm_90, CUDA 13.0)."
    for fact in (
        "132 SMs",
        "2048 threads",
        "65536 registers",
        "228 KiB shared memory",
        "227 KiB of dynamic shared",
        "50 MiB L2",
        "79.2 GiB device memory",
        "copy bandwidth 3.01 TB/s",
        "TF32 380 TFLOP/s",
    ):
        assert fact in text, fact
    assert cache_bytes({"device": H100}) == 52428800


def test_before_the_baseline_only_the_kind_is_known() -> None:
    assert sheet("cuda", None) == "Target device: cuda"
    assert cache_bytes(None) is None


def test_this_machines_cpu_facts_reach_the_sheet() -> None:
    """The facts the worker adds to every job's environment, read from this machine's /proc and sysfs."""
    facts = hardware_facts(torch.device("cpu"))
    assert int(facts["cores"]) >= 1
    caches = cpu_caches()
    if caches:  # sysfs lists the caches on Linux hosts; the last level is the largest
        assert int(facts["llc_bytes"]) == max(caches.values())
    env = {"cpu": "This CPU", "threads": "2", **facts}
    text = sheet("cpu", {"device": env, "ceilings": {"copy_bytes_per_s": 2e10, "fp32_flops": 1.8e11}})
    assert text.startswith(f"Target device: cpu, an This CPU, {facts['cores']} cores for the job")
    assert "matmul fp32 180 GFLOP/s" in text
    if facts["isa"]:
        assert f"ISA extensions: {facts['isa']}." in text
