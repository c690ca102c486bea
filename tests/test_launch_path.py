"""The builtin CUDA templates' launch path (``candidate_python.STREAM_PY``).

On the CPU: every argument type is packed into its own 8-byte slot, and any other type is refused by name.
On a real GPU (``gpu`` marker): arguments of every type the wrappers pass arrive where the kernel reads them, on
PyTorch's current stream, for plain and cooperative kernels, from several threads at once, and a refused launch
is an error that names the driver's reason."""

from __future__ import annotations

import ctypes
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy
import pytest
import torch

from agents.builtin.candidate_python import STREAM_PY
from tests.conftest import module_level_redefinitions


@pytest.fixture(scope="module")
def slots_class() -> Any:
    # CuPy's scalar types are NumPy's own (cupy.int32 is numpy.int32), and the snippet's module level reads only
    # those names, so it runs on a machine without CuPy with NumPy under that name.
    namespace: dict[str, Any] = {"cupy": numpy, "torch": torch}
    exec(STREAM_PY, namespace)
    return namespace["_Slots"]


def test_every_argument_type_gets_its_own_8_byte_slot(slots_class: Any) -> None:
    values = (
        0x7F12_3456_7000,  # a device pointer, as a Python int
        numpy.int32(-3),
        numpy.int64(-(1 << 40)),
        numpy.uint32(0xFFFF_FFF0),
        numpy.float64(0.25),
        numpy.float32(-0.5),
        7,
        2.5,
        True,
        numpy.uint64(1 << 63),
        numpy.bool_(False),
    )
    formats = "qiqIdfqd?Q?"
    slots = slots_class(tuple(map(type, values)))
    slots.pack_into(slots.buffer, 0, *values)
    raw = slots.buffer.raw
    for k, (value, fmt) in enumerate(zip(values, formats, strict=True)):
        assert struct.unpack_from("<" + fmt, raw, 8 * k)[0] == value, (k, value)
    base = ctypes.addressof(slots.buffer)
    assert list(slots.table) == [base + 8 * k for k in range(len(values))]
    assert slots.address == ctypes.addressof(slots.table)


def test_an_argument_of_another_type_is_refused_by_name(slots_class: Any) -> None:
    with pytest.raises(TypeError, match="got Tensor, float16"):
        slots_class((int, torch.Tensor, numpy.float32, numpy.float16))


# Mixed sizes in an order that needs padding (4-byte arguments before 8-byte ones) and ends on a 4-byte one
# (the parameters end before the C struct's trailing padding).
SOURCE = r"""
extern "C" __global__ void mix(float* y, const float* x, int a, long long c, unsigned int b, double e, long long n,
                               float d)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * d + (float)a + (float)b + (float)c + (float)e;
}
"""


@pytest.fixture(scope="module")
def launch_path() -> dict[str, Any]:
    cupy = pytest.importorskip("cupy")
    namespace: dict[str, Any] = {"cupy": cupy, "torch": torch}
    exec(STREAM_PY, namespace)
    namespace["plain"] = cupy.RawKernel(SOURCE, "mix")
    namespace["cooperative"] = cupy.RawKernel(SOURCE, "mix", enable_cooperative_groups=True)
    return namespace


def args(cupy: Any, y: torch.Tensor, x: torch.Tensor) -> tuple:
    return (
        y.data_ptr(),
        x.data_ptr(),
        cupy.int32(-3),
        cupy.int64(1 << 20),
        cupy.uint32(5),
        cupy.float64(0.25),
        cupy.int64(x.numel()),
        cupy.float32(0.5),
    )


def test_a_template_helper_named_like_a_launch_helper_is_caught() -> None:
    # A template that defines its own _driver_launch after the snippet would replace the one _run_kernel calls.
    assert module_level_redefinitions(STREAM_PY + "\n\ndef _driver_launch(n):\n    return n\n") == ["_driver_launch"]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["plain", "cooperative"])
def test_every_argument_type_reaches_the_kernel(launch_path: dict[str, Any], kernel: str) -> None:
    cupy = launch_path["cupy"]
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the launch goes to the current stream, whichever it is
        side.wait_stream(torch.cuda.default_stream())
        launch_path["_run_kernel"](launch_path[kernel], x.device, (4,), (256,), args(cupy, y, x))
    side.synchronize()
    expected = x * 0.5 + (-3 + 5 + (1 << 20) + 0.25)
    torch.testing.assert_close(y, expected)


@pytest.mark.gpu
def test_launches_from_several_threads_at_once_each_get_their_own_arguments(launch_path: dict[str, Any]) -> None:
    cupy = launch_path["cupy"]
    x = torch.randn(4096, device="cuda")

    def launch(k: int) -> torch.Tensor:
        y = torch.empty_like(x)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.default_stream())
            a = (y.data_ptr(), x.data_ptr(), cupy.int32(k), cupy.int64(0), cupy.uint32(0), cupy.float64(0.0))
            for _ in range(50):  # the same slots signature, over and over, while the other threads pack theirs
                launch_path["_run_kernel"](
                    launch_path["plain"], x.device, (16,), (256,), (*a, cupy.int64(4096), cupy.float32(1.0))
                )
            side.synchronize()
        return y

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(launch, range(64)))
    for k, y in enumerate(results):
        torch.testing.assert_close(y, x + k, msg=f"thread launch {k}")


@pytest.mark.gpu
def test_a_refused_launch_names_the_driver_error(launch_path: dict[str, Any]) -> None:
    cupy = launch_path["cupy"]
    x = torch.randn(16, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
        launch_path["_run_kernel"](launch_path["plain"], x.device, (1,), (4096,), args(cupy, torch.empty_like(x), x))
