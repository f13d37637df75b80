// cucc/tanhf.h: tanhf as an inline definition that gives glibc's result bit for bit and that
// the host compiler can vectorize, for kernels and host code compiled by dev/cpu/cucc.
//
// Entry point: ::tanhf itself. glibc's tanhf (2.36, the generic flt-32 code on x86-64) is a
// call into libm with branches on the argument's range and a second call into expm1f; a GELU
// kernel spends most of its time there. This header gives tanhf a GNU inline definition
// (`extern inline` with gnu_inline: a body for inlining only, no symbol of its own; a call that
// is not inlined still goes to libm), which evaluates the same float operations in the same
// order as glibc's tanhf and expm1f, but every branch as a select, so a loop over elements
// compiles to vector code. The equality with glibc is checked for every one of the 2^32 float
// inputs, NaN payloads included, by dev/cpu/tests/cucc_tanhf_exact.cu.
//
// glibc's algorithm (the facts this reproduces): for 2^-55 <= |x| < 1, tanh = -t / (t + 2)
// with t = expm1(-2|x|); for 1 <= |x| < 22, tanh = 1 - 2 / (t + 2) with t = expm1(2|x|);
// |x| < 2^-55 gives x (1 + x), |x| >= 22 gives 1, infinities 1/x +- 1, with the sign of x.
// expm1(y) reduces y = k ln2 + r (ln2 split in a high and a low part, k = 0 for
// |y| <= ln2 / 2, +-1 up to 1.5 ln2, else y / ln2 rounded half away from zero), evaluates a
// degree-5 polynomial in (r/2)^2 and scales the result by 2^k in the exponent bits, with a
// different final combination for k = 0, k = -1, k < 23 and the rest.
//
// Only where the host compiler cannot fuse a multiply and an add into one rounding (no FMA in
// the target, or an ISO -std mode, where GCC does not contract): a fused operation would round
// differently from glibc; and only on glibc 2.36 (Debian 12's), the version whose operations it
// reproduces. Elsewhere tanhf stays libm's call.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && (!defined(__FMA__) || defined(__STRICT_ANSI__)) && \
    defined(__GLIBC__) && __GLIBC__ == 2 && __GLIBC_MINOR__ == 36
#define CUCC_INLINE_TANHF 1  // tells the test that the definition below is in use

namespace cucc {

inline uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

inline float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// c ? a : b as arithmetic on all-ones or all-zero masks: GCC turns a ?: between floats back
// into branches (and would not speculate the operations of either side, which may trap), which
// leaves a loop over elements unvectorized.
inline uint32_t select_mask(bool c) { return 0u - (uint32_t)c; }

inline float select(bool c, float a, float b) {
    uint32_t m = select_mask(c);
    return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
}

inline int select(bool c, int a, int b) {
    uint32_t m = select_mask(c);
    return (int)(((uint32_t)a & m) | ((uint32_t)b & ~m));
}

// glibc's expm1f for the arguments tanhf gives it: y in (-2, -2^-54] or [2, 44). Every
// operation in glibc's order; the branches on k computed on every lane and selected.
__attribute__((always_inline)) inline float expm1f_for_tanhf(float y) {
    const float ln2_hi = 6.9313812256e-01f;  // 0x3f317180
    const float ln2_lo = 9.0580006145e-06f;  // 0x3717f7d1
    const float invln2 = 1.4426950216e+00f;  // 0x3fb8aa3b
    const float q1 = -3.3333335072e-02f, q2 = 1.5873016091e-03f, q3 = -7.9365076090e-05f,
                q4 = 4.0082177293e-06f, q5 = -2.0109921195e-07f;
    uint32_t hy = float_bits(y) & 0x7fffffffu;
    bool negative = y < 0.0f;
    float half = select(negative, -0.5f, 0.5f);
    int rounded = (int)(invln2 * y + half);
    int k =
        select(hy <= 0x3eb17218u, 0, select(hy < 0x3f851592u, select(negative, -1, 1), rounded));
    // k = +-1 is glibc's hi = y -+ ln2_hi, lo = +-ln2_lo: the same as the general form with t =
    // +-1 (a product with +-1 is exact); k = 0 gives hi = y, lo = 0, so r = y and c = 0.
    float t = (float)k;
    float hi = y - t * ln2_hi;
    float lo = t * ln2_lo;
    float r = hi - lo;
    float c = (hi - r) - lo;
    float hfx = 0.5f * r;
    float hxs = r * hfx;
    float r1 = 1.0f + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))));
    float t3 = 3.0f - r1 * hfx;
    float e = hxs * ((r1 - t3) / (6.0f - r * t3));
    float at_zero = r - (r * e - hxs);  // k == 0 (r is y)
    float e2 = r * (e - c) - c;
    e2 -= hxs;
    float at_minus_one = 0.5f * (r - e2) - 0.5f;
    uint32_t exponent = (uint32_t)k << 23;  // adds k to a float's exponent
    float wide = bits_float(float_bits(1.0f - (e2 - r)) + exponent) - 1.0f;  // k <= -2, k > 56
    float below_23 = bits_float(
        float_bits((1.0f - bits_float((uint32_t)(0x7f - k) << 23)) - (e2 - r)) + exponent);
    float rest = bits_float(float_bits((r - (e2 + bits_float((uint32_t)(0x7f - k) << 23))) + 1.0f) +
                            exponent);
    float scaled = select((k <= -2) | (k > 56), wide, select(k < 23, below_23, rest));
    float result = select(k == 0, at_zero, select(k == -1, at_minus_one, scaled));
    return select(hy < 0x33000000u, y, result);  // |y| < 2^-25: y itself
}

}  // namespace cucc

// The definition glibc's declaration in <math.h> gets: used where the compiler inlines it.
extern "C" __inline __attribute__((__gnu_inline__, __always_inline__)) float tanhf(
    float x) noexcept {
    // Every value is computed on every lane, then selected (see select).
    uint32_t jx = cucc::float_bits(x), ix = jx & 0x7fffffffu;
    bool positive = (int32_t)jx >= 0;
    bool main_range = (ix >= 0x24000000u) & (ix < 0x41b00000u);  // 2^-55 <= |x| < 22
    float ax = cucc::select(main_range, fabsf(x), 1.0f);  // other lanes take a harmless argument
    bool from_one = ax >= 1.0f;
    float twice = 2.0f * ax, minus_twice = -2.0f * ax;
    float t = cucc::expm1f_for_tanhf(cucc::select(from_one, twice, minus_twice));
    // 1 - 2 / (t + 2) or -t / (t + 2): one division, its numerator selected
    float quotient = cucc::select(from_one, 2.0f, -t) / (t + 2.0f);
    float z = cucc::select(from_one, 1.0f - quotient, quotient);
    float minus_z = -z;
    float large = cucc::select(positive, 1.0f, -1.0f);
    // glibc's 1/x +- 1 without its division: +-1 at +-infinity (1/x is +-0), and at a NaN 1/x is
    // x quieted (sign and payload kept, as SSE's division gives it), which +- 1 leaves as it is
    float not_finite = cucc::select(ix > 0x7f800000u, cucc::bits_float(jx | 0x00400000u), large);
    float x_one_plus_x = x * (1.0f + x);
    float tiny = cucc::select(ix == 0, x, x_one_plus_x);
    float in_range = cucc::select(positive, z, minus_z);
    return cucc::select(
        ix >= 0x7f800000u, not_finite,
        cucc::select(ix >= 0x41b00000u, large, cucc::select(main_range, in_range, tiny)));
}

#endif
