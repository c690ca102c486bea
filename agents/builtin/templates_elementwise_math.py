"""The C the fused pointwise kernels share: CUDA's math (intrinsics under FAST), the CPU's branch-free
polynomials written to vectorise (libm's are scalar calls), and the composite activations over both.

On the CPU ``exp`` is Cephes' (~2 ulp), ``log`` Cephes' logf (~1 ulp), ``tanh`` Cephes' odd polynomial below
0.625 and ``1 - 2 / (exp(2|x|) + 1)`` above, ``erf`` a Taylor series below 0.5 and Abramowitz-Stegun 7.1.26
above (absolute error < 1.5e-7), ``expm1``/``log1p`` with small-|x| forms: all far inside both tolerance
policies (strict: 1e-4).
"""

from __future__ import annotations

CUDA_MATH = r"""
#define EW_FN __device__ __forceinline__
#define EW_INF __int_as_float(0x7f800000)
#if FAST_MATH
// __expf / __logf (ex2.approx / lg2.approx: ~2 ulp, plus ~1e-7 absolute near exp's underflow and log(1)),
// __fdividef (0 when the divisor exceeds 2^126, which no finite fp32 operand of these chains reaches here).
#define EW_EXP(x) __expf(x)
#define EW_LOG(x) __logf(x)
#define EW_DIV(a, b) __fdividef((a), (b))
EW_FN float EW_TANH(float x)
{
    const float e = __expf(-2.0f * fabsf(x));  // in (0, 1]: no overflow; absolute error ~1e-7 near 0
    return copysignf(__fdividef(1.0f - e, 1.0f + e), x);
}
#else
#define EW_EXP(x) expf(x)
#define EW_LOG(x) logf(x)
#define EW_DIV(a, b) ((a) / (b))
#define EW_TANH(x) tanhf(x)
#endif
#define EW_EXP2(x) exp2f(x)
#define EW_EXPM1(x) expm1f(x)
#define EW_LOG2(x) log2f(x)
#define EW_LOG10(x) log10f(x)
#define EW_LOG1P(x) log1pf(x)
#define EW_SQRT(x) sqrtf(x)
#define EW_RSQRT(x) rsqrtf(x)
#define EW_ERF(x) erff(x)
#define EW_SIN(x) sinf(x)
#define EW_COS(x) cosf(x)
#define EW_POW(a, b) powf((a), (b))
#define EW_FLOOR(x) floorf(x)
#define EW_CEIL(x) ceilf(x)
#define EW_TRUNC(x) truncf(x)
#define EW_RINT(x) rintf(x)
#define EW_FABS(x) fabsf(x)
"""

# The heavy op's fp16 result, read by the tail (``epilogue_cuda_half``): converted on load, exactly (every half
# is a float). Inline PTX, as cuda_fp16.h's __half2float is, so that NVRTC needs no header.
HALF_CU = r"""
__device__ __forceinline__ float half_float(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float4 half4_float4(uint2 r)  // four halves, loaded as 8 bytes
{
    return make_float4(half_float((unsigned short)(r.x & 0xffffu)), half_float((unsigned short)(r.x >> 16)),
                       half_float((unsigned short)(r.y & 0xffffu)), half_float((unsigned short)(r.y >> 16)));
}
"""

# Where broadcast operand k's value for flat output index i is (``(i / inner) % size``).
BAND_INDEX_CU = r"""template <typename I>
__device__ __forceinline__ I band_index(I i, I inner, I size)
{
    // inner and size are the same for the whole grid: these branches never diverge
    return size == 1 ? (I)0 : (inner == 1 ? i % size : (i / inner) % size);
}"""


def index_typed(params: str, ctype: str) -> str:
    """A kernel body's parameter list (``I inner0, I size0`` ...) with the entry point's index type for ``I``."""
    return params.replace("I inner", f"{ctype} inner").replace("I size", f"{ctype} size")


CPU_MATH = r"""
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define EW_FN static inline
#define EW_INF INFINITY

static inline float ew_from_bits(int32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }
static inline int32_t ew_to_bits(float f) { int32_t b; memcpy(&b, &f, sizeof b); return b; }

/* Cephes expf: x = n ln2 + r (Cody-Waite), degree-6 polynomial in r (~2 ulp). 2^n is applied as two halves
   so that n = 128 (x up to 88.72) and results down to the denormals stay exact; inf above, 0 below. */
EW_FN float k_exp(float x)
{
    const float c = x < -103.9f ? -103.9f : (x > 88.7228f ? 88.7228f : x);
    const float fn = __builtin_floorf(c * 1.44269504088896341f + 0.5f);
    const float r = (c - fn * 0.693359375f) - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t n = (int32_t)fn, n1 = n >> 1, n2 = n - n1;
    const float e = p * ew_from_bits((n1 + 127) << 23) * ew_from_bits((n2 + 127) << 23);
    return x > 88.7228f ? EW_INF : (x < -103.9f ? 0.0f : e);
}

/* Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), a degree-8 polynomial in m - 1 (~1 ulp);
   denormals rescaled first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN. */
EW_FN float k_log(float x)
{
    const int tiny = x < 1.17549435e-38f;
    const float xs = tiny ? x * 8388608.0f : x;
    const int32_t bits = ew_to_bits(xs);
    int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = ew_from_bits((bits & 0x007fffff) | 0x3f000000);  /* in [0.5, 1) */
    const int lowm = m < 0.707106781186547524f;
    e = lowm ? e - 1 : e;
    m = lowm ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    const float fe = (float)e - (tiny ? 23.0f : 0.0f);
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    float r = m + y + 0.693359375f * fe;
    r = x == EW_INF ? EW_INF : r;
    r = x == 0.0f ? -EW_INF : r;
    return x < 0.0f ? NAN : (x != x ? x : r);
}

/* tanh: Cephes' odd polynomial below |x| = 0.625 (relative ~1e-7), 1 - 2 / (exp(2|x|) + 1) above. */
EW_FN float k_tanh(float x)
{
    const float ax = __builtin_fabsf(x), z = x * x;
    const float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                      1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    const float big = 1.0f - 2.0f / (k_exp(2.0f * ax) + 1.0f);
    return ax < 0.625f ? p : (x < 0.0f ? -big : big);
}

/* erf: Taylor series to x^11 below |x| = 0.5 (relative < 3e-8), Abramowitz-Stegun 7.1.26 above
   (absolute < 1.5e-7). */
EW_FN float k_erf(float x)
{
    const float ax = __builtin_fabsf(x), z = x * x;
    const float s = x * (1.1283791671f + z * (-0.3761263890f + z * (0.1128379167f + z * (-0.02686617064f +
                    z * (0.005223977625f + z * -0.0008548327023f)))));
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f +
                       t * 1.061405429f))));
    const float big = 1.0f - poly * k_exp(-z);
    return ax < 0.5f ? s : (x < 0.0f ? -big : big);
}

/* expm1: Taylor series to x^7 below |x| = 0.5 (relative < 2e-7), exp(x) - 1 above. */
EW_FN float k_expm1(float x)
{
    const float s = x * (1.0f + x * (0.5f + x * (1.6666667e-1f + x * (4.1666668e-2f + x * (8.3333333e-3f +
                    x * (1.3888889e-3f + x * 1.9841270e-4f))))));
    return __builtin_fabsf(x) < 0.5f ? s : k_exp(x) - 1.0f;
}

/* log1p: log(u) * x / (u - 1) with u = 1 + x corrects u's rounding (Goldberg); exact x where u rounds to 1. */
EW_FN float k_log1p(float x)
{
    const float u = 1.0f + x, d = u - 1.0f;
    const float r = d == 0.0f ? x : k_log(u) * (x / d);
    return x == EW_INF ? EW_INF : r;
}

#define EW_EXP(x) k_exp(x)
#define EW_LOG(x) k_log(x)
#define EW_DIV(a, b) ((a) / (b))
#define EW_TANH(x) k_tanh(x)
#define EW_EXP2(x) k_exp((x) * 0.693147180559945309f)
#define EW_EXPM1(x) k_expm1(x)
#define EW_LOG2(x) (k_log(x) * 1.44269504088896341f)
#define EW_LOG10(x) (k_log(x) * 0.434294481903251828f)
#define EW_LOG1P(x) k_log1p(x)
#define EW_SQRT(x) __builtin_sqrtf(x)
#define EW_RSQRT(x) (1.0f / __builtin_sqrtf(x))
#define EW_ERF(x) k_erf(x)
#define EW_SIN(x) sinf(x)  /* libm: a scalar call, the loop then runs unvectorised */
#define EW_COS(x) cosf(x)
#define EW_POW(a, b) powf((a), (b))
#define EW_FLOOR(x) __builtin_floorf(x)
#define EW_CEIL(x) __builtin_ceilf(x)
#define EW_TRUNC(x) __builtin_truncf(x)
#define EW_RINT(x) __builtin_rintf(x)
#define EW_FABS(x) __builtin_fabsf(x)
"""

# Composite activations, written once over the EW_ macros (selects, not fmaxf: NaN propagates like torch's).
COMMON = r"""
EW_FN float ew_sigmoid(float x) { return EW_DIV(1.0f, 1.0f + EW_EXP(-x)); }
EW_FN float ew_softplus(float x, float beta, float threshold)
{
    return x * beta > threshold ? x : EW_LOG1P(EW_EXP(x * beta)) / beta;
}
EW_FN float ew_gelu_erf(float x) { return 0.5f * x * (1.0f + EW_ERF(x * 0.707106781186547524f)); }
EW_FN float ew_gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + EW_TANH(0.797884560802865356f * (x + 0.044715f * x * x * x)));
}
EW_FN float ew_mish(float x) { return x * EW_TANH(ew_softplus(x, 1.0f, 20.0f)); }
EW_FN float ew_relu6_3(float x) { const float r = x + 3.0f; return r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r); }
EW_FN float ew_log_sigmoid(float x)
{
    return (x < 0.0f ? x : 0.0f) - EW_LOG1P(EW_EXP(-EW_FABS(x)));
}
EW_FN float ew_max(float a, float b) { return a != a ? a : (a > b ? a : b); }
EW_FN float ew_min(float a, float b) { return a != a ? a : (a < b ? a : b); }
EW_FN float ew_fmax(float a, float b) { return a != a ? b : (b != b ? a : (a > b ? a : b)); }
EW_FN float ew_fmin(float a, float b) { return a != a ? b : (b != b ? a : (a < b ? a : b)); }
EW_FN float ew_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
"""
