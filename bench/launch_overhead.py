"""What one call costs the host, as the harness times it: a candidate's launch path against PyTorch's.

    python bench/launch_overhead.py [--calls 400]

Timed with the harness's timer in its host-counting mode (``tools.timing.CudaTimer(hold_ms=0)``, the
harness's only mode before the launch was hidden, and ``TimingConfig(hide_launch=False)`` now): it
synchronises before each timed call, so a call's host work (Python, argument packing, stream lookup) is idle
GPU time between the two events. Each contender is timed on a 16 KiB input, where the kernel itself takes ~2
µs and the rest is host, and on a 256 MiB input, where the kernel dominates. The same relu kernel runs in
every CuPy row; only the Python around the launch differs; the templates' row runs the launch helpers the
builtin templates render (``agents.builtin.candidate_python``). Prints a Markdown table of medians, then the
host time of each step a wrapper may take around a launch, each alone in a loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy  # noqa: E402
import torch  # noqa: E402

from agents.builtin.candidate_python import FUNCTION_PY, STREAM_PY  # noqa: E402
from tools.timing import CudaTimer  # noqa: E402

RELU = r"""
extern "C" __global__ void __launch_bounds__(256) relu4(const float4* __restrict__ x, float4* __restrict__ y,
                                                        unsigned int n4) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
    }
}
"""


def contenders(device: torch.device) -> dict[str, Callable[[torch.Tensor], Any]]:
    module = cupy.RawModule(code=RELU)
    sms = torch.cuda.get_device_properties(device).multi_processor_count

    def grid(n4: int) -> int:
        return min(-(-n4 // 256), 8 * sms)

    def per_call_lookups(x: torch.Tensor) -> torch.Tensor:
        # The builtin templates up to this benchmark: a CuPy stream object, the device context and the
        # function made or looked up on every call.
        out = torch.empty_like(x)
        n4 = x.numel() // 4
        props = torch.cuda.get_device_properties(x.device)
        blocks = min(-(-n4 // 256), 8 * props.multi_processor_count)
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            module.get_function("relu4")((blocks,), (256,), (x.data_ptr(), out.data_ptr(), cupy.uint32(n4)))
        return out

    # The launch path every builtin CUDA template renders (agents.builtin.candidate_python), run as is.
    snippets: dict[str, Any] = {"cupy": cupy, "torch": torch, "_MODULE": module}
    exec(STREAM_PY + FUNCTION_PY, snippets)
    run_kernel, function = snippets["_run_kernel"], snippets["_function"]

    def templates(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n4 = x.numel() // 4
        run_kernel(function("relu4"), x.device, (grid(n4),), (256,), (x.data_ptr(), out.data_ptr(), cupy.uint32(n4)))
        return out

    return {
        "torch.relu (eager)": torch.relu,
        "CuPy: stream object, device context, function lookup every call (templates before e7af476)": per_call_lookups,
        "CuPy: the templates' launch path (candidate_python.STREAM_PY, FUNCTION_PY)": templates,
    }


def steps(device: torch.device, calls: int) -> dict[str, float]:
    """Median host µs of each step a wrapper may take around its launch (no GPU work waits on any of them)."""
    x = torch.empty(4096, device=device)
    stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(device))
    empty = cupy.RawModule(code='extern "C" __global__ void nothing(const float* x, unsigned int n) {}')
    kernel = empty.get_function("nothing")
    identity = torch.nn.Identity()
    ops: dict[str, Callable[[], Any]] = {
        "torch.cuda.current_stream(device)": lambda: torch.cuda.current_stream(device),
        "torch._C._cuda_getCurrentRawStream(index)": lambda: torch._C._cuda_getCurrentRawStream(device.index),
        "cupy.cuda.runtime.getDevice()": cupy.cuda.runtime.getDevice,
        "torch.cuda.get_device_properties(device)": lambda: torch.cuda.get_device_properties(device),
        "torch.empty(4096, device=device)": lambda: torch.empty(4096, device=device),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "x.contiguous()": x.contiguous,
        "x.data_ptr()": x.data_ptr,
        "cupy.int64(4096)": lambda: cupy.int64(4096),
        "nn.Module call (Identity)": lambda: identity(x),
        "CuPy launch, 2 args, stream object": lambda: kernel(
            (1,), (32,), (x.data_ptr(), cupy.uint32(1)), stream=stream
        ),
    }
    out = {}
    for name, op in ops.items():
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                op()
            samples.append((time.perf_counter() - t0) * 1e6 / calls)
        out[name] = statistics.median(samples)
    torch.cuda.synchronize(device)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    timer = CudaTimer(device, hold_ms=0)
    fns = contenders(device)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CuPy {cupy.__version__}\n")
    print("| contender | 16 KiB input: median µs | 256 MiB input: median µs |")
    print("|---|---|---|")
    sizes = (4096, 64 << 20)
    inputs = [torch.randn(n, device=device) for n in sizes]
    for name, fn in fns.items():
        cells = []
        try:
            fn(inputs[0])
        except TypeError as exc:  # a CuPy without the stream= keyword: say so, time the others
            print(f"| {name} | not run: {exc} | |")
            continue
        for x in inputs:
            expected = torch.relu(x)
            for _ in range(20):
                fn(x)
            samples = []
            for _ in range(args.calls):
                timer.flush()
                ms, _, out = timer.time_call(fn, [x])
                samples.append(ms * 1000)
            if not torch.equal(out, expected):
                raise SystemExit(f"{name}: wrong output")
            cells.append(f"{statistics.median(samples):.1f}")
        print(f"| {name} | {' | '.join(cells)} |")
    print("\n| host step | median µs |\n|---|---|")
    for name, us in steps(device, 2000).items():
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
