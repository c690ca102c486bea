"""Row softmax in the KernelBench form: CUDA built by ``torch.utils.cpp_extension.load_inline``.

Kept to measure what the load_inline path costs per candidate next to NVRTC; nvcc builds it at
import (tens of seconds). One block per row, online max/sum, launched on PyTorch's current stream.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cfloat>

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    __shared__ float red_m[32], red_s[32];
    float m = -FLT_MAX, s = 0.f;
    for (long long i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = row[i];
        float nm = fmaxf(m, v);
        s = s * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
    for (int off = 16; off > 0; off /= 2) {
        float om = __shfl_xor_sync(0xffffffff, m, off), os = __shfl_xor_sync(0xffffffff, s, off);
        float nm = fmaxf(m, om);
        s = s * __expf(m - nm) + os * __expf(om - nm);
        m = nm;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        int n = blockDim.x / 32;
        m = lane < n ? red_m[lane] : -FLT_MAX;
        s = lane < n ? red_s[lane] : 0.f;
        for (int off = 16; off > 0; off /= 2) {
            float om = __shfl_xor_sync(0xffffffff, m, off), os = __shfl_xor_sync(0xffffffff, s, off);
            float nm = fmaxf(m, om);
            s = s * __expf(m - nm) + os * __expf(om - nm);
            m = nm;
        }
        if (lane == 0) { red_m[0] = m; red_s[0] = s; }
    }
    __syncthreads();
    m = red_m[0];
    float inv = 1.f / red_s[0];
    for (long long i = threadIdx.x; i < cols; i += blockDim.x) out[i] = __expf(row[i] - m) * inv;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "expects a 2-D float CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    softmax_rows<<<x.size(0), 512, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SRC = "torch::Tensor softmax_forward(torch::Tensor x);"

_ext = load_inline(
    name="kforge_softmax_load_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["softmax_forward"],
    extra_cuda_cflags=["-O3", "-arch=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_forward(x)
