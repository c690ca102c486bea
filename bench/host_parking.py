"""What it costs a GPU job to park an answer in host memory, by each way of getting that memory, and to read it
back a piece at a time for a comparison.

A check job of a large problem parks every answer it computed before candidate code existed (tools/answers.py);
on a 6.4 GB output that was most of the job (bench/RESULTS.md, issue 36). Each way below copies one device
tensor of ``--gib`` GiB to the host, then reads it back in ``--piece-mib`` pieces onto the device, ``--repeat``
times, each time into memory it has just obtained and holding every copy to the end (as a job holds its answers, so
no way gets memory back from a cache):

- ``pinned``: ``torch.empty(..., pin_memory=True)``, torch's caching host allocator (cudaHostAlloc);
- ``pageable``: plain host memory, first touched by the copy itself;
- ``prefaulted``: plain host memory touched first by all of torch's threads, then copied into;
- ``registered``: prefaulted, then page-locked with cudaHostRegister (and unregistered when done);
- ``store``: ``tools.answers.to_host``, what the worker does now (prefaulted and registered through the driver).

    python bench/host_parking.py --gib 6 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import answers

GIB = 1 << 30


def _pinned(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    return torch.empty_like(t, device="cpu", pin_memory=True), lambda: None


def _pageable(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    return torch.empty_like(t, device="cpu"), lambda: None


def _prefaulted(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    host = torch.empty_like(t, device="cpu")
    answers.every_byte(host).zero_()
    return host, lambda: None


def _registered(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    host, _ = _prefaulted(t)
    cudart = torch.cuda.cudart()
    nbytes = host.numel() * host.element_size()
    err = cudart.cudaHostRegister(host.data_ptr(), nbytes, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister failed with {err}")
    return host, lambda: cudart.cudaHostUnregister(host.data_ptr())


WAYS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, Callable[[], None]]]] = {
    "pinned": _pinned,
    "pageable": _pageable,
    "prefaulted": _prefaulted,
    "registered": _registered,
}


def _timed(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _read_back(flat: torch.Tensor, scratch: torch.Tensor) -> None:
    """Copy ``flat`` onto the device a piece of ``scratch``'s size at a time, as a comparison does."""
    piece = scratch.numel()
    for at in range(0, flat.numel(), piece):
        n = min(piece, flat.numel() - at)
        scratch[:n].copy_(flat[at : at + n])


def measure(way: str, src: torch.Tensor, piece: int, repeat: int) -> dict[str, float]:
    """Median seconds to obtain the host memory, to copy the answer in, and to read it back in pieces."""
    get, copy, back = [], [], []
    scratch = torch.empty(piece, dtype=torch.uint8, device=src.device)
    kept: list[tuple[torch.Tensor, Callable[[], None]]] = []
    for _ in range(repeat):
        if way == "store":
            copy.append(_timed(lambda: kept.append((answers.to_host(src), lambda: None))))
            get.append(0.0)
        else:
            get.append(_timed(lambda: kept.append(WAYS[way](src))))
            copy.append(_timed(lambda: kept[-1][0].copy_(src)))
        back.append(_timed(lambda: _read_back(answers.every_byte(kept[-1][0]), scratch)))
    for _, release in kept:
        release()
    return {"get": statistics.median(get), "copy": statistics.median(copy), "back": statistics.median(back)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=6.0, help="size of the answer, GiB")
    parser.add_argument("--piece-mib", type=int, default=256, help="size of each piece read back, MiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ways", nargs="+", default=[*WAYS, "store"], choices=[*WAYS, "store"])
    args = parser.parse_args()
    src = torch.rand(int(args.gib * GIB) // 4, device="cuda")
    size = src.numel() * 4 / GIB
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{size:.2f} GiB per answer, pieces of {args.piece_mib} MiB, median of {args.repeat}"
    )
    print("| way | memory s | copy in s | park GB/s | read back s | read GB/s |")
    print("|---|---|---|---|---|---|")
    for way in args.ways:
        m = measure(way, src, args.piece_mib << 20, args.repeat)
        park = m["get"] + m["copy"]
        gb = src.numel() * 4 / 1e9
        cells = [f"{m['get']:.2f}", f"{m['copy']:.2f}", f"{gb / park:.1f}", f"{m['back']:.2f}", f"{gb / m['back']:.1f}"]
        print(f"| {way} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
