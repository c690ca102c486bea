"""The CPU fp32 GEMM template (``matmul_cpu``): packed, cache-blocked micro-kernels over OpenMP threads,
built on the shared prelude and binding of ``templates_cpu``.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import c_bool, c_params, fill, params_text, transposed, wrap
from agents.builtin.templates_cpu import C_PRELUDE, binding_block, imports_block

MATMUL_C = c_params(r"""
/* C = A @ B (fp32, fp32 accumulation), batched over a leading dim.
@SUMMARY_C@
   BLIS-style: B packed in KC x NC blocks of NR-wide column panels (shared by the threads), A packed
   per thread in MR-row panels, an MR x NR register micro-kernel; partial tiles are zero-padded. */
#param VW            /* floats per vector */
#param MR            /* rows of the micro-tile */
#param NV            /* vectors per row of the micro-tile: NR = NV * VW columns */
#param KC           /* depth of a packed block */
#param MC           /* rows of A per thread task (at most) */
#param NC          /* columns of a packed B block */
#param THREADED      /* use every OpenMP thread (0: one thread) */
#define UNROLL 1
@PRELUDE@
#define NR (NV * VW)

int max_threads(void)
{
#if THREADED && defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

int64_t workspace_floats(int64_t M, int64_t K, int64_t N, int nthreads)
{
    const int64_t kc = min64(KC, K), nc = min64(NC, N), mc = min64(MC, round_up(M, MR));
    return kc * round_up(nc, NR) + (int64_t)nthreads * kc * round_up(mc, MR) + 16;
}

static inline void micro(const float* restrict ap, const float* restrict bp, int64_t kc, float* restrict c,
                         int64_t ldc, int64_t mr, int64_t nr, int accumulate)
{
    vf acc[MR][NV];
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = vsplat(0.0f);
    for (int64_t k = 0; k < kc; ++k) {
        vf b[NV];
        for (int v = 0; v < NV; ++v) b[v] = vload(bp + k * NR + v * VW);
        for (int i = 0; i < MR; ++i) {
            const vf a = vsplat(ap[k * MR + i]);
            for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
        }
    }
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; ++i)
            for (int v = 0; v < NV; ++v) {
                float* p = c + i * ldc + v * VW;
                vstore(p, accumulate ? vload(p) + acc[i][v] : acc[i][v]);
            }
    } else {
        float tile[MR][NR];
        for (int i = 0; i < MR; ++i)
            for (int v = 0; v < NV; ++v) vstore(&tile[i][v * VW], acc[i][v]);
        for (int64_t i = 0; i < mr; ++i)
            for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i][j] : tile[i][j];
    }
}

void matmul(const float* restrict A, const float* restrict B, float* restrict C, int64_t batch, int64_t M,
            int64_t K, int64_t N, float* restrict ws, int nthreads)
{
    if (K == 0) {
        memset(C, 0, sizeof(float) * (size_t)(batch * M * N));
        return;
    }
    const int64_t kcmax = min64(KC, K), ncmax = min64(NC, N), mcmax = min64(MC, round_up(M, MR));
    float* bpack = ws;
    float* apacks = ws + kcmax * round_up(ncmax, NR);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
#ifdef _OPENMP
        const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
#else
        const int nt = 1, tid = 0;
#endif
        float* apack = apacks + (int64_t)tid * kcmax * round_up(mcmax, MR);
        /* Row blocks of at most MC rows, as many per thread for every thread (balanced). */
        int64_t nblk = (M + mcmax - 1) / mcmax;
        nblk = (nblk + nt - 1) / nt * nt;
        int64_t mcb = round_up((M + nblk - 1) / nblk, MR);
        if (mcb > round_up(mcmax, MR)) mcb = round_up(mcmax, MR);
        for (int64_t g = 0; g < batch; ++g) {
            const float* a = A + g * M * K;
            const float* b = B + g * K * N;
            float* c = C + g * M * N;
            for (int64_t jc = 0; jc < N; jc += NC) {
                const int64_t nc = min64(NC, N - jc);
                for (int64_t pc = 0; pc < K; pc += KC) {
                    const int64_t kc = min64(KC, K - pc);
                    #pragma omp for schedule(static)
                    for (int64_t jr = 0; jr < nc; jr += NR) {
                        const int64_t nr = min64(NR, nc - jr);
                        float* dst = bpack + jr * kc;
                        for (int64_t k = 0; k < kc; ++k) {
                            const float* src = b + (pc + k) * N + jc + jr;
                            int64_t j = 0;
                            for (; j < nr; ++j) dst[k * NR + j] = src[j];
                            for (; j < NR; ++j) dst[k * NR + j] = 0.0f;
                        }
                    }
                    #pragma omp for schedule(static)
                    for (int64_t ic = 0; ic < M; ic += mcb) {
                        const int64_t mc = min64(mcb, M - ic);
                        for (int64_t ir = 0; ir < mc; ir += MR) {
                            const int64_t mr = min64(MR, mc - ir);
                            float* dst = apack + ir * kc;
                            for (int64_t k = 0; k < kc; ++k) {
                                int64_t i = 0;
                                for (; i < mr; ++i) dst[k * MR + i] = a[(ic + ir + i) * K + pc + k];
                                for (; i < MR; ++i) dst[k * MR + i] = 0.0f;
                            }
                        }
                        for (int64_t jr = 0; jr < nc; jr += NR)
                            for (int64_t ir = 0; ir < mc; ir += MR)
                                micro(apack + ir * kc, bpack + jr * kc, kc, c + (ic + ir) * N + jc + jr, N,
                                      min64(MR, mc - ir), min64(NR, nc - jr), pc > 0);
                    }
                }
            }
        }
    }
}
""")

MATMUL_PY = r'''"""Builtin candidate `matmul_cpu` (agents.builtin).

@SUMMARY_DOC@

Parameters: @PARAMS@.

C = A @ B for 2-D fp32 tensors (or 3-D with a common batch dim, as bmm, or N-D by 2-D, as torch.matmul),
fp32 accumulation, any sizes.
"""

@IMPORTS@
C_SRC = r"""@C_SRC@"""

@BINDING@

_lib = _bind()
_matmul, _workspace_floats = _lib.matmul, _lib.workspace_floats
_THREADS = _lib.max_threads()
_F32 = torch.float32
_TRANSPOSED = @TRANSPOSED@  # (A, B): multiplied as the problem's A.T / B.T


class ModelNew(nn.Module):
    """C = A @ B (same constructor as the problem's Model: no arguments)."""

    def __init__(self):
        super().__init__()
        self._workspace = torch.empty(0, dtype=_F32)  # packing scratch (not results), grown on demand

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if A.dtype != _F32 or B.dtype != _F32 or not (A.is_cpu and B.is_cpu):
            raise TypeError("A and B must be float32 CPU tensors")
        if _TRANSPOSED[0]:
            A = A.t()  # the problem multiplies A.T (made contiguous below: one copy, then the same kernel)
        if _TRANSPOSED[1]:
            B = B.t()
        sa, sb = A.shape, B.shape
        if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:
            batch, M, K, N = 1, sa[0], sa[1], sb[1]
            out_shape = (M, N)
        elif len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and sa[2] == sb[1]:
            batch, M, K, N = sa[0], sa[1], sa[2], sb[2]
            out_shape = (batch, M, N)
        elif len(sa) > 2 and len(sb) == 2 and sa[-1] == sb[0]:  # (..., K) @ (K, N), as torch.matmul
            batch, M, K, N = 1, sa[:-1].numel(), sa[-1], sb[1]
            out_shape = (*sa[:-1], N)
        else:
            raise ValueError(f"cannot multiply {tuple(sa)} by {tuple(sb)}")
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty(out_shape, dtype=_F32)
        if batch * M * N == 0:
            return C
        need = _workspace_floats(M, K, N, _THREADS)
        if self._workspace.numel() < need:
            self._workspace = torch.empty(need, dtype=_F32)
        _matmul(A.data_ptr(), B.data_ptr(), C.data_ptr(), batch, M, K, N, self._workspace.data_ptr(), _THREADS)
        return C
'''


def render_matmul(params: dict[str, Any], summary: str) -> str:
    c_src = fill(
        MATMUL_C,
        SUMMARY_C=wrap(summary, "   "),
        VW=params["vec"],
        MR=params["mr"],
        NV=params["nv"],
        KC=params["kc"],
        MC=params["mc"],
        NC=params["nc"],
        THREADED=c_bool(params["threads"] == "all"),
        PRELUDE=C_PRELUDE,
    )
    signatures = {"matmul": ("pppiiiipn", ""), "workspace_floats": ("iiin", "i"), "max_threads": ("", "n")}
    return fill(
        MATMUL_PY,
        SUMMARY_DOC=wrap(summary),
        PARAMS=params_text(params),
        C_SRC=c_src,
        IMPORTS=imports_block(params["binding"]),
        BINDING=binding_block("matmul_cpu", signatures, params["binding"]),
        TRANSPOSED=transposed(params),
    )


__all__ = ["render_matmul"]
