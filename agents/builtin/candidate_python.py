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

# A LayerNorm module's forward (CUDA) up to its launch: checks, the rows of prod(normalized_shape) trailing
# elements, the weight and bias, an empty input returned as is. The launch that follows is each template's own.
LAYERNORM_FORWARD_PY = r"""    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k :]) != self.normalized_shape:
            raise ValueError(f"input {tuple(x.shape)} does not end in {self.normalized_shape}")
        x = x.contiguous()
        weight, bias = self.ln.weight.detach().contiguous(), self.ln.bias.detach().contiguous()
        y = torch.empty_like(x)
        cols = math.prod(self.normalized_shape)
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return y"""

# A matmul's operand checks and its 2-D or batched 3-D shapes (CUDA), after the transposes the problem applies
# (the template defines _TRANSPOSED); the size limits that follow are each kernel's own.
MATMUL_OPERANDS_PY = r'''def _as_cuda_f32(t: torch.Tensor, name: str) -> torch.Tensor:
    if not t.is_cuda or t.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 CUDA tensor, got {t.dtype} on {t.device}")
    return t.contiguous()


class ModelNew(nn.Module):
    """C = A @ B (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if _TRANSPOSED[0]:
            A = A.t()  # the problem multiplies A.T (made contiguous below: one copy, then the same kernel)
        if _TRANSPOSED[1]:
            B = B.t()
        A, B = _as_cuda_f32(A, "A"), _as_cuda_f32(B, "B")
        if A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]:
            batch, (M, K), N = 1, A.shape, B.shape[1]
            out_shape = (M, N)
        elif A.dim() == 3 and B.dim() == 3 and A.shape[0] == B.shape[0] and A.shape[2] == B.shape[1]:
            batch, M, K = A.shape
            N = B.shape[2]
            out_shape = (batch, M, N)
        elif A.dim() > 2 and B.dim() == 2 and A.shape[-1] == B.shape[0]:  # (..., K) @ (K, N), as torch.matmul
            batch, M, K, N = 1, A.shape[:-1].numel(), A.shape[-1], B.shape[1]
            out_shape = (*A.shape[:-1], N)
            A = A.view(M, K)
        else:
            raise ValueError(f"cannot multiply {tuple(A.shape)} by {tuple(B.shape)}")'''

# A tiled matmul's launch (CUDA) after MATMUL_OPERANDS_PY, for kernels whose tiles divide M, N and K and that read
# A and B in 16-byte pieces; the template defines _BM, _BN, _BK, _THREADS, _SMEM (dynamic shared memory) and _KERNEL.
MATMUL_TILES_LAUNCH_PY = r"""
        if M % _BM or N % _BN or K % _BK or batch > 65535 or (M // _BM) * (N // _BN) >= 2**31:
            raise ValueError(f"this kernel needs M % {_BM}, N % {_BN}, K % {_BK} == 0; got M={M} N={N} K={K}")
        if A.data_ptr() % 16 or B.data_ptr() % 16:
            raise ValueError("this kernel reads A and B in 16-byte pieces: both must start on a 16-byte boundary")
        C = torch.empty(out_shape, device=A.device, dtype=torch.float32)
        if C.numel() == 0:
            return C
        grid = ((M // _BM) * (N // _BN), batch)
        args = (A.data_ptr(), B.data_ptr(), C.data_ptr(), cupy.int32(M), cupy.int32(N), cupy.int32(K))
        _run_kernel(_KERNEL, A.device, grid, (_THREADS,), args, shared_mem=_SMEM)
        return C
"""

# Launching on PyTorch's current stream with the least host work: the harness synchronises before each timed
# call, so Python around a launch is counted. Handing the stream to the launch, with no CuPy stream or device
# context and no function lookup per call, was the fastest CuPy path in both runs of bench/launch_overhead.py
# on the H200: 2-16 µs a call below making and entering them every call.
# The driver's cuLaunchKernel through ctypes (arguments packed in a C struct per call) was slower still: 8.6 µs
# a launch against CuPy's 6.4 (bench/RESULTS.md), and CuPy's own binding of it (cupy.cuda.driver.launchKernel)
# with the arguments packed once per call into slots kept per signature was no faster (9.6 against 9.2 µs):
# the driver's launch, not CuPy's argument handling, is what a launch costs.
# Every CUDA module template holds STREAM_PY (``fill`` puts it where a template says @STREAM_PY@), and
# FUNCTION_PY after a ``RawModule``.
STREAM_PY = r'''
_STREAMS = {}


def _stream(device: torch.device) -> "cupy.cuda.Stream":
    """CuPy's view of PyTorch's current stream on ``device`` (made on first use, then reused)."""
    # The raw handle, as torch.compile's generated code reads it: torch.cuda.current_stream builds a Python
    # Stream object on every call.
    raw = torch._C._cuda_getCurrentRawStream(device.index)
    stream = _STREAMS.get(raw)
    if stream is None:
        stream = _STREAMS[raw] = cupy.cuda.Stream.from_external(torch.cuda.current_stream(device))
    return stream


_SMS = {}


def _sm_count(device: torch.device) -> int:
    """The number of SMs of ``device`` (read once: the properties call costs host time on every launch)."""
    if device.index not in _SMS:
        _SMS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device.index]


def _run_kernel(kernel, device: torch.device, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
    """Launch ``kernel`` on PyTorch's current stream of ``device`` (switching CuPy's device only if need be)."""
    if device.index == cupy.cuda.runtime.getDevice():
        kernel(grid, block, args, shared_mem=shared_mem, stream=_stream(device))
        return
    with cupy.cuda.Device(device.index):
        kernel(grid, block, args, shared_mem=shared_mem, stream=_stream(device))

'''

FUNCTION_PY = r'''_FUNCTIONS = {}


def _function(name: str):
    """The module's kernel ``name``, looked up once."""
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _MODULE.get_function(name)
    return _FUNCTIONS[name]

'''
