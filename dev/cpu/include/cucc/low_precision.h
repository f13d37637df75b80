// cucc/low_precision.h: device functions on 16-bit floats (__half, __nv_bfloat16 and their x2
// pairs) that the toolkit's cuda_fp16.h / cuda_bf16.h only define for nvcc's device pass.
//
// Shared by our cuda_fp16.h and cuda_bf16.h shadows: each specializes cucc::half_traits for its
// type and expands CUCC_HALF_DEVICE_FUNCTIONS once. Results are rounded the way the GPU rounds
// them: computed in float (exact for +, -, * of two 16-bit values), then rounded to nearest
// even; fused multiply-add rounds once (see fma_round_to_odd). Transcendentals (hexp ...) are
// the float function rounded, which may differ from the GPU's approximations by one unit.
#pragma once

#include <cucc/device.h>

namespace cucc {

// Specialized by each 16-bit type: float to_float(H), H from_float(float) rounding to nearest
// even, and the pair type H2 with make(H, H).
template <class H>
struct half_traits;

// a*b + c rounded once to float with round-to-odd: a*b is exact in double (16-bit types carry
// at most 11 significant bits), two-sum gives the exact error of adding c, and the result is
// truncated to float with its last bit set when inexact. Rounding that to a format with at most
// 11 bits is then the correctly rounded fused result (round-to-odd with 24 >= 2*11 + 2 bits).
inline float fma_round_to_odd(float a, float b, float c) {
    double p = (double)a * (double)b;
    double s = p + (double)c;
    if (!std::isfinite(s)) return (float)s;
    double t = s - p;
    double err = (p - (s - t)) + ((double)c - t);  // exact: p + c == s + err
    float f = (float)s;
    double above = ((double)f - s) - err;  // sign of f - (p + c)
    if (above == 0.0) return f;
    if ((above > 0.0) == (s > 0.0)) f = nextafterf(f, 0.0f);  // truncate toward zero
    unsigned bits = __float_as_uint(f) | 1u;
    return __uint_as_float(bits);
}

template <class H>
H fma_rounded(H a, H b, H c) {
    using T = half_traits<H>;
    return T::from_float(fma_round_to_odd(T::to_float(a), T::to_float(b), T::to_float(c)));
}
template <class H>
H relu(H x) {
    using T = half_traits<H>;
    float f = T::to_float(x);
    return f != f ? T::from_float(f) : T::from_float(f > 0.0f ? f : 0.0f);
}
template <class H>
H saturate(H x) {
    using T = half_traits<H>;
    return T::from_float(__saturatef(T::to_float(x)));
}
template <class H, class F>
H map(H x, F f) {
    using T = half_traits<H>;
    return T::from_float(f(T::to_float(x)));
}
template <class H2, class F>
H2 map2(H2 x, F f) {
    return half_traits<decltype(x.x)>::make(f(x.x), f(x.y));
}

}  // namespace cucc

// The functions of one 16-bit type H with pair type H2, defined the same way for both.
#define CUCC_HALF_UNARY(H, H2, name, name2, expr)          \
    inline H name(H a) {                                   \
        return cucc::map(a, [](float x) { return expr; }); \
    }                                                      \
    inline H2 name2(H2 a) {                                \
        return cucc::map2(a, [](H v) { return name(v); }); \
    }

#define CUCC_HALF_DEVICE_FUNCTIONS(H, H2)                                                          \
    CUCC_HALF_UNARY(H, H2, hexp, h2exp, expf(x))                                                   \
    CUCC_HALF_UNARY(H, H2, hexp2, h2exp2, exp2f(x))                                                \
    CUCC_HALF_UNARY(H, H2, hexp10, h2exp10, exp10f(x))                                             \
    CUCC_HALF_UNARY(H, H2, hlog, h2log, logf(x))                                                   \
    CUCC_HALF_UNARY(H, H2, hlog2, h2log2, log2f(x))                                                \
    CUCC_HALF_UNARY(H, H2, hlog10, h2log10, log10f(x))                                             \
    CUCC_HALF_UNARY(H, H2, hsqrt, h2sqrt, sqrtf(x))                                                \
    CUCC_HALF_UNARY(H, H2, hrsqrt, h2rsqrt, 1.0f / sqrtf(x))                                       \
    CUCC_HALF_UNARY(H, H2, hrcp, h2rcp, 1.0f / x)                                                  \
    CUCC_HALF_UNARY(H, H2, hsin, h2sin, sinf(x))                                                   \
    CUCC_HALF_UNARY(H, H2, hcos, h2cos, cosf(x))                                                   \
    CUCC_HALF_UNARY(H, H2, htanh, h2tanh, tanhf(x))                                                \
    CUCC_HALF_UNARY(H, H2, htanh_approx, h2tanh_approx, tanhf(x))                                  \
    CUCC_HALF_UNARY(H, H2, hceil, h2ceil, ceilf(x))                                                \
    CUCC_HALF_UNARY(H, H2, hfloor, h2floor, floorf(x))                                             \
    CUCC_HALF_UNARY(H, H2, hrint, h2rint, nearbyintf(x))                                           \
    CUCC_HALF_UNARY(H, H2, htrunc, h2trunc, truncf(x))                                             \
    inline H __hfma(H a, H b, H c) { return cucc::fma_rounded(a, b, c); }                          \
    inline H __hfma_relu(H a, H b, H c) { return cucc::relu(__hfma(a, b, c)); }                    \
    inline H __hfma_sat(H a, H b, H c) { return cucc::saturate(__hfma(a, b, c)); }                 \
    inline H2 __hfma2(H2 a, H2 b, H2 c) {                                                          \
        return cucc::half_traits<H>::make(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));           \
    }                                                                                              \
    inline H2 __hfma2_relu(H2 a, H2 b, H2 c) {                                                     \
        return cucc::half_traits<H>::make(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y)); \
    }                                                                                              \
    inline H2 __hfma2_sat(H2 a, H2 b, H2 c) {                                                      \
        return cucc::half_traits<H>::make(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));   \
    }                                                                                              \
    /* The sum is computed in float, exact for two 16-bit values, then rounded once. */            \
    inline H atomicAdd(H* address, H v) {                                                          \
        return cucc::atomic_update(address, [v](H old) {                                           \
            using T = cucc::half_traits<H>;                                                        \
            return T::from_float(T::to_float(old) + T::to_float(v));                               \
        });                                                                                        \
    }                                                                                              \
    /* CUDA makes each half of the pair atomic; one 32-bit update is stronger. */                  \
    inline H2 atomicAdd(H2* address, H2 v) {                                                       \
        return cucc::atomic_update(address, [v](H2 old) {                                          \
            using T = cucc::half_traits<H>;                                                        \
            return T::make(T::from_float(T::to_float(old.x) + T::to_float(v.x)),                   \
                           T::from_float(T::to_float(old.y) + T::to_float(v.y)));                  \
        });                                                                                        \
    }
