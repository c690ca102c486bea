"""Python that several candidate wrappers emit alike, spliced into their ``ModelNew`` sources.

Each rendered candidate stays one self-contained file, so these lines are repeated in the output; here they are
written once.
"""

from __future__ import annotations

# A row-wise softmax's module (CUDA): checks, the (rows, cols) view of the last dim, an empty input returned as is.
# The launch that follows is each template's own.
SOFTMAX_ROWS_PY = r'''class ModelNew(nn.Module):
    """@WHAT@(x, dim=-1); no constructor arguments, like the problem's Model."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1] if x.dim() > 0 else 1
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return out'''

# A matmul's operand checks and its 2-D or batched 3-D shapes (CUDA); the size limits that follow are each
# kernel's own.
MATMUL_OPERANDS_PY = r'''def _as_cuda_f32(t: torch.Tensor, name: str) -> torch.Tensor:
    if not t.is_cuda or t.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 CUDA tensor, got {t.dtype} on {t.device}")
    return t.contiguous()


class ModelNew(nn.Module):
    """C = A @ B (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = _as_cuda_f32(A, "A"), _as_cuda_f32(B, "B")
        if A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]:
            batch, (M, K), N = 1, A.shape, B.shape[1]
            out_shape = (M, N)
        elif A.dim() == 3 and B.dim() == 3 and A.shape[0] == B.shape[0] and A.shape[2] == B.shape[1]:
            batch, M, K = A.shape
            N = B.shape[2]
            out_shape = (batch, M, N)
        else:
            raise ValueError(f"cannot multiply {tuple(A.shape)} by {tuple(B.shape)}")'''

# Launching on PyTorch's current stream with the least host work: the harness synchronises before each timed
# call, so Python around a launch is counted. The kernel goes to the driver's cuLaunchKernel through CuPy's
# thin binding (cupy.cuda.driver.launchKernel), with the arguments packed by one struct.pack_into into slots
# made once per argument signature; CuPy's own kernel call converts every argument into a new object on every
# launch. An earlier ctypes binding that built a C struct per call was slower than CuPy (8.6 against 6.4 µs a
# launch, bench/RESULTS.md); this path's figures are in the same file.
STREAM_PY = r'''
import ctypes as _ctypes
import struct as _struct

_SMS = {}


def _sm_count(device: torch.device) -> int:
    """The number of SMs of ``device`` (read once: the properties call costs host time on every launch)."""
    if device.index not in _SMS:
        _SMS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device.index]


# How CuPy passes each argument type (a Python int as int64, a float as double), one 8-byte slot each: the
# driver copies every argument from its slot at the kernel's own size and alignment.
_CODES = {
    int: "q", float: "d", bool: "?", cupy.bool_: "?", cupy.int32: "i", cupy.uint32: "I", cupy.int64: "q",
    cupy.uint64: "Q", cupy.float32: "f", cupy.float64: "d",
}


class _Slots:
    """Argument slots for one signature and the table of their addresses that cuLaunchKernel reads."""

    def __init__(self, types: tuple) -> None:
        unknown = [t.__name__ for t in types if t not in _CODES]
        if unknown:
            wanted = "ints, floats, bools or 32/64-bit NumPy scalars"
            raise TypeError(f"kernel arguments must be {wanted}, got {', '.join(unknown)}")
        codes = "".join(_CODES[t] + "x" * (8 - _struct.calcsize(_CODES[t])) for t in types)
        self.pack_into = _struct.Struct("<" + codes).pack_into
        n = max(len(types), 1)
        self.buffer = _ctypes.create_string_buffer(8 * n)
        base = _ctypes.addressof(self.buffer)
        self.table = (_ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        self.address = _ctypes.addressof(self.table)


# Free slots per signature. A launch releases the GIL, so a slot set is taken off its list for the launch and
# put back after: two threads launching at once never pack into the same slots (list.pop is atomic).
_FREE = {}
_ENTRIES = {}


def _entry(kernel: "cupy.RawKernel", index: int) -> tuple:
    """(CUfunction handle of ``kernel`` on device ``index``, cooperative launch?); ``index`` is the current device."""
    entry = _ENTRIES.get((kernel, index))
    if entry is None:
        entry = _ENTRIES[(kernel, index)] = (kernel.kernel.ptr, kernel.enable_cooperative_groups)
    return entry


def _driver_launch(kernel, index: int, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> None:
    function, cooperative = _entry(kernel, index)
    types = tuple(map(type, args))
    free = _FREE.get(types)
    if free is None:
        free = _FREE[types] = []
    try:
        slots = free.pop()
    except IndexError:  # none free: first launch of this signature, or another thread holds them all
        slots = _Slots(types)
    try:
        slots.pack_into(slots.buffer, 0, *args)
        gx, gy, gz = (*grid, 1, 1)[:3]
        bx, by, bz = (*block, 1, 1)[:3]
        dims = (gx, gy, gz, bx, by, bz, shared_mem, torch._C._cuda_getCurrentRawStream(index), slots.address)
        if cooperative:
            cupy.cuda.driver.launchCooperativeKernel(function, *dims)
        else:
            cupy.cuda.driver.launchKernel(function, *dims, 0)
    finally:
        free.append(slots)


def _run_kernel(kernel, device: torch.device, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
    """Launch ``kernel`` on PyTorch's current stream of ``device`` (switching CuPy's device only if need be)."""
    if device.index == cupy.cuda.runtime.getDevice():
        _driver_launch(kernel, device.index, grid, block, args, shared_mem)
        return
    with cupy.cuda.Device(device.index):
        _driver_launch(kernel, device.index, grid, block, args, shared_mem)

'''

FUNCTION_PY = r'''_FUNCTIONS = {}


def _function(name: str):
    """The module's kernel ``name``, looked up once."""
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _MODULE.get_function(name)
    return _FUNCTIONS[name]

'''
