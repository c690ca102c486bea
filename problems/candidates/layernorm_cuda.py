"""LayerNorm on CUDA: one block per row, Welford statistics in fp32, then one normalising pass.

A row is the trailing prod(normalized_shape) elements (rows = numel / row length). Pass 1: each
thread runs Welford over its strided share of the row (float4 loads when everything is 16-byte
aligned) and the block merges the partial (count, mean, M2) with warp shuffles. Pass 2:
y = (x - mean) * rstd * weight + bias. Works for layernorm_16x64x256x256 and layernorm_small.
"""

import math

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""
#define THREADS 1024
#define WARPS (THREADS / 32)

struct Welford { float n, mean, m2; };  // count, mean, sum of squared deviations

__device__ __forceinline__ void welford_add(Welford& w, float x)
{
    w.n += 1.0f;
    const float d = x - w.mean;
    w.mean += d / w.n;
    w.m2 += d * (x - w.mean);
}

__device__ __forceinline__ void welford_merge(Welford& a, const Welford& b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) return;
    const float d = b.mean - a.mean;
    const float fb = b.n / n;
    a.mean += d * fb;
    a.m2 += b.m2 + d * d * a.n * fb;
    a.n = n;
}

__device__ __forceinline__ void welford_warp(Welford& w)
{
    for (int off = 16; off > 0; off >>= 1) {
        Welford o;
        o.n = __shfl_xor_sync(0xffffffffu, w.n, off);
        o.mean = __shfl_xor_sync(0xffffffffu, w.mean, off);
        o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, off);
        welford_merge(w, o);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
               const float* __restrict__ bias, float* __restrict__ y, long long cols, float eps)
{
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    const bool vec = ((reinterpret_cast<unsigned long long>(xr) | reinterpret_cast<unsigned long long>(yr) |
                       reinterpret_cast<unsigned long long>(weight) |
                       reinterpret_cast<unsigned long long>(bias)) & 15) == 0;
    const long long head = vec ? cols / 4 * 4 : 0;  // elements handled as float4

    // Pass 1: per-thread Welford, then a block reduction.
    Welford w = {0.0f, 0.0f, 0.0f};
    for (long long i = threadIdx.x * 4LL; i < head; i += THREADS * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        welford_add(w, v.x);
        welford_add(w, v.y);
        welford_add(w, v.z);
        welford_add(w, v.w);
    }
    for (long long i = head + threadIdx.x; i < cols; i += THREADS) welford_add(w, xr[i]);

    __shared__ Welford part[WARPS];
    __shared__ float stats[2];
    welford_warp(w);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) part[warp] = w;
    __syncthreads();
    if (warp == 0) {
        w = lane < WARPS ? part[lane] : Welford{0.0f, 0.0f, 0.0f};
        welford_warp(w);
        if (lane == 0) {
            stats[0] = w.mean;
            stats[1] = rsqrtf(w.m2 / (float)cols + eps);  // biased variance, as nn.LayerNorm
        }
    }
    __syncthreads();
    const float mean = stats[0], rstd = stats[1];

    // Pass 2: normalise, scale and shift.
    for (long long i = threadIdx.x * 4LL; i < head; i += THREADS * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        const float4 g = *reinterpret_cast<const float4*>(weight + i);
        const float4 b = *reinterpret_cast<const float4*>(bias + i);
        float4 r;
        r.x = (v.x - mean) * rstd * g.x + b.x;
        r.y = (v.y - mean) * rstd * g.y + b.y;
        r.z = (v.z - mean) * rstd * g.z + b.z;
        r.w = (v.w - mean) * rstd * g.w + b.w;
        *reinterpret_cast<float4*>(yr + i) = r;
    }
    for (long long i = head + threadIdx.x; i < cols; i += THREADS)
        yr[i] = (xr[i] - mean) * rstd * weight[i] + bias[i];
}
"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
_THREADS = 1024
EPS = 1e-5  # nn.LayerNorm's default, which the problem uses


class _Affine(nn.Module):
    """Holds the learnable weight and bias, initialised like nn.LayerNorm (ones / zeros)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))


class ModelNew(nn.Module):
    """LayerNorm over the trailing ``normalized_shape`` dims, same constructor as the problem's Model."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        # Parameters live in a submodule named `ln`, so the state_dict keys are `ln.weight` and
        # `ln.bias`, exactly the reference's (whose nn.LayerNorm is `self.ln`).
        self.ln = _Affine(self.normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
            return y
        ptrs = (x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr())
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            kernel = _MODULE.get_function("layernorm_rows")
            kernel((rows,), (_THREADS,), (*ptrs, cupy.int64(cols), cupy.float32(EPS)))
        return y
