"""The builtin CUDA templates' launch path (``candidate_python.STREAM_PY``).

On the CPU: a template cannot replace one of the snippet's helpers by defining a name of its own. On a real GPU
(``gpu`` marker): arguments of every type the wrappers pass arrive where the kernel reads them, on PyTorch's
current stream, for plain and cooperative kernels, and a refused launch is an error that names the driver's
reason."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agents.builtin.candidate_python import STREAM_PY
from tests.conftest import module_level_redefinitions

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


def test_a_template_helper_named_like_a_launch_helper_is_caught() -> None:
    # A template that defines its own _run_kernel after the snippet would replace the one its launches call.
    assert module_level_redefinitions(STREAM_PY + "\n\ndef _run_kernel(n):\n    return n\n") == ["_run_kernel"]


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
def test_a_refused_launch_names_the_driver_error(launch_path: dict[str, Any]) -> None:
    cupy = launch_path["cupy"]
    x = torch.randn(16, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
        launch_path["_run_kernel"](launch_path["plain"], x.device, (1,), (4096,), args(cupy, torch.empty_like(x), x))
