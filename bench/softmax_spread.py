"""Is the softmax candidate's job-to-job spread a property of the kernel or of the harness?

    python bench/softmax_spread.py

One process, no sandbox: load the reference CUDA candidate, then for several fresh allocations of
the (4096, 65536) input (each shifted by a different padding allocation) time the candidate and
torch.softmax with CUDA events, L2 flushed before each call. If the candidate's median moves with the
allocation while torch's does not, the spread belongs to the kernel's placement, not to the harness.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.problem import import_source  # noqa: E402


def median_ms(fn, x: torch.Tensor, flush: torch.Tensor, reps: int = 200) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize()
        start.record()
        fn(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    path = ROOT / "problems" / "candidates" / "softmax_cuda.py"
    candidate = import_source(path.read_text(), str(path), "candidate").ModelNew().cuda()
    flush = torch.empty(120 << 18, device="cuda")
    print("alloc  pad_MiB  candidate_ms  torch_ms  ratio")
    for i in range(8):
        pad = torch.empty((i * 37 + 1) << 18, device="cuda")  # shifts where x lands
        x = torch.randn(4096, 65536, device="cuda")
        for _ in range(3):
            candidate(x)
            torch.softmax(x, dim=1)
        c = median_ms(candidate, x, flush)
        t = median_ms(lambda v: torch.softmax(v, dim=1), x, flush)
        print(f"{i:5d}  {pad.numel() * 4 >> 20:7d}  {c:12.4f}  {t:8.4f}  {t / c:5.3f}", flush=True)
        del x, pad


if __name__ == "__main__":
    main()
