"""What one call costs the host, as the harness times it: a candidate's launch path against PyTorch's.

    python bench/launch_overhead.py [--calls 400]

The harness synchronises before each timed call, so a call's host work (Python, argument packing,
stream lookup) is idle GPU time between the two events. Each contender is timed with the harness's own
timer (``tools.timing.CudaTimer``) on a 16 KiB input, where the kernel itself takes ~2 µs and the rest is
host, and on a 256 MiB input, where the kernel dominates. The same relu kernel runs in every CuPy row;
only the Python around the launch differs. Prints a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy  # noqa: E402
import torch  # noqa: E402

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

    streams: dict[int, cupy.cuda.Stream] = {}

    def stream_of(device: torch.device) -> cupy.cuda.Stream:
        current = torch.cuda.current_stream(device)
        stream = streams.get(current.cuda_stream)
        if stream is None:
            stream = streams[current.cuda_stream] = cupy.cuda.Stream.from_external(current)
        return stream

    def cached_stream(x: torch.Tensor) -> torch.Tensor:
        # The builtin templates now (candidate_python.STREAM_PY): the stream object made once per stream.
        out = torch.empty_like(x)
        n4 = x.numel() // 4
        with cupy.cuda.Device(x.device.index), stream_of(x.device):
            module.get_function("relu4")((grid(n4),), (256,), (x.data_ptr(), out.data_ptr(), cupy.uint32(n4)))
        return out

    function = module.get_function("relu4")

    def no_contexts(x: torch.Tensor) -> torch.Tensor:
        # The least Python CuPy allows: the function kept, the stream handed to the launch, no contexts.
        out = torch.empty_like(x)
        n4 = x.numel() // 4
        function((grid(n4),), (256,), (x.data_ptr(), out.data_ptr(), cupy.uint32(n4)), stream=stream_of(x.device))
        return out

    return {
        "torch.relu (eager)": torch.relu,
        "CuPy: stream object, device context, function lookup every call (templates before)": per_call_lookups,
        "CuPy: stream object kept; device context, function lookup every call (templates now)": cached_stream,
        "CuPy: function and stream object kept, no contexts": no_contexts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    timer = CudaTimer(device)
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
                ms, out = timer.time_call(fn, [x])
                samples.append(ms * 1000)
            if not torch.equal(out, expected):
                raise SystemExit(f"{name}: wrong output")
            cells.append(f"{statistics.median(samples):.1f}")
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
