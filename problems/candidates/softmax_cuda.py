"""Row softmax on CUDA: one block per row, online max/sum, warp-shuffle reductions.

Pass 1: each thread keeps a running (max, sum of exp(x - max)) over its strided share of the row
(float4 loads when the row is 16-byte aligned), then the block merges the pairs with warp shuffles.
Pass 2: out = exp(x - max) / sum. Softmax is taken over the last dim, which is dim 1 of the
problem's 2-D input. Works for softmax_4096x65536 and softmax_small.
"""

import cupy
import torch
import torch.nn as nn

CUDA_SRC = r"""
#define THREADS 512
#define WARPS (THREADS / 32)
#define NEG_INF __int_as_float(0xff800000)

// Merge the running pair (m, s) with (m2, s2): s is a sum of exp(x - m).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    if (m2 == NEG_INF) return;  // nothing to add (this also skips a float4 of -inf, whose s2 is NaN)
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_rows(const float* __restrict__ x, float* __restrict__ out, long long cols)
{
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = out + (long long)blockIdx.x * cols;
    const bool vec = ((reinterpret_cast<unsigned long long>(xr) |
                       reinterpret_cast<unsigned long long>(yr)) & 15) == 0;
    const long long head = vec ? cols / 4 * 4 : 0;  // elements handled as float4

    // Pass 1: per-thread online max and sum.
    float m = NEG_INF, s = 0.0f;
    for (long long i = threadIdx.x * 4LL; i < head; i += THREADS * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
        merge(m, s, vm, expf(v.x - vm) + expf(v.y - vm) + expf(v.z - vm) + expf(v.w - vm));
    }
    for (long long i = head + threadIdx.x; i < cols; i += THREADS) merge(m, s, xr[i], 1.0f);

    // Block reduction: within each warp, then across the warps' results.
    __shared__ float sm[WARPS], ss[WARPS];
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    m = lane < WARPS ? sm[lane] : NEG_INF;
    s = lane < WARPS ? ss[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    // Every warp did the same final reduction, so every thread now holds the row's (max, sum).
    const float inv = 1.0f / s;

    // Pass 2: normalise.
    for (long long i = threadIdx.x * 4LL; i < head; i += THREADS * 4LL) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        float4 r;
        r.x = expf(v.x - m) * inv;
        r.y = expf(v.y - m) * inv;
        r.z = expf(v.z - m) * inv;
        r.w = expf(v.w - m) * inv;
        *reinterpret_cast<float4*>(yr + i) = r;
    }
    for (long long i = head + threadIdx.x; i < cols; i += THREADS) yr[i] = expf(xr[i] - m) * inv;
}
"""

_MODULE = cupy.RawModule(code=CUDA_SRC, options=("-std=c++17",))
_THREADS = 512


class ModelNew(nn.Module):
    """softmax(x, dim=-1) (= dim 1 for the problem's 2-D input); no constructor arguments."""

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
            return out
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream(x.device))
        with cupy.cuda.Device(x.device.index), stream:
            kernel = _MODULE.get_function("softmax_rows")
            kernel((rows,), (_THREADS,), (x.data_ptr(), out.data_ptr(), cupy.int64(cols)))
        return out
