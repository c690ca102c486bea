import cupy
import torch
import torch.nn as nn

SRC = r"""
// out[i] = tanh(x[i] * w[i % cols] + b[i % cols]) over n elements of a row-major (n / cols, cols) array.
extern "C" __global__ void scaled_tanh(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ out,
                                       long long n, long long cols)
{
    // A grid-stride loop: correct for any n and any grid size.
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long c = i % cols;
        out[i] = tanhf(x[i] * w[c] + b[c]);
    }
}
"""

_kernel = cupy.RawModule(code=SRC, options=("-std=c++17",)).get_function("scaled_tanh")
THREADS = 256


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # The reference's names and shapes: the checker copies its weights in by name.
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.weight.contiguous(), self.bias.contiguous()
        out = torch.empty_like(x)
        n, cols = x.numel(), x.shape[-1]
        if n == 0:
            return out
        blocks = min((n + THREADS - 1) // THREADS, 1 << 16)
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            _kernel(
                (blocks,),
                (THREADS,),
                (x.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr(), cupy.int64(n), cupy.int64(cols)),
            )
        return out
