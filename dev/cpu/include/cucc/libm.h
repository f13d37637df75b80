// cucc/libm.h: tanhf and expf as inline definitions that give glibc's results bit for bit and
// that the host compiler can vectorize, for kernels and host code compiled by dev/cpu/cucc.
//
// Entry points: ::tanhf and ::expf themselves. glibc's (2.36 on x86-64) are calls into libm: a
// GELU kernel spends most of its time in tanhf's branches and its second call into expm1f, and
// an attention kernel's call of expf per score makes the compiler save and reload every vector
// register it keeps live across the call (all of them are caller-saved). This header gives
// both a GNU inline definition (`extern inline` with gnu_inline: a body for inlining only, no
// symbol of its own; a call that is not inlined still goes to libm), which evaluates the same
// floating-point operations in the same order as glibc, but every branch as a select, so a loop
// over elements compiles to vector code. The equality with glibc is checked for every one of
// the 2^32 float inputs, NaN payloads included, by dev/cpu/tests/cucc_libm_exact.cu.
//
// Only on glibc 2.36 (Debian 12's), the version whose operations they reproduce, and with g++ 12
// or later (__builtin_assoc_barrier, below); elsewhere both stay libm's calls.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && __GNUC__ >= 12 && defined(__x86_64__) && defined(__GLIBC__) && \
    __GLIBC__ == 2 && __GLIBC_MINOR__ == 36
namespace cucc {

// The bits of x as a To of the same size (std::bit_cast before C++20).
template <class To, class From>
inline To bits_as(From x) {
    static_assert(sizeof(To) == sizeof(From), "same size");
    To r;
    memcpy(&r, &x, sizeof(r));
    return r;
}
inline uint32_t float_bits(float x) { return bits_as<uint32_t>(x); }
inline float bits_float(uint32_t u) { return bits_as<float>(u); }

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

// a * b rounded on its own: never fused with an add that uses it, whatever the contraction mode
// (glibc's tanhf is built without fused operations). The barrier costs no instruction.
__attribute__((always_inline)) inline float mul(float a, float b) {
    return __builtin_assoc_barrier(a * b);
}

}  // namespace cucc

// ---------------------------------------------------------------------------------------------
// tanhf. glibc's algorithm (the facts this reproduces): for 2^-55 <= |x| < 1, tanh = -t / (t + 2)
// with t = expm1(-2|x|); for 1 <= |x| < 22, tanh = 1 - 2 / (t + 2) with t = expm1(2|x|);
// |x| < 2^-55 gives x (1 + x), |x| >= 22 gives 1, infinities 1/x +- 1, with the sign of x.
// expm1(y) reduces y = k ln2 + r (ln2 split in a high and a low part, k = 0 for
// |y| <= ln2 / 2, +-1 up to 1.5 ln2, else y / ln2 rounded half away from zero), evaluates a
// degree-5 polynomial in (r/2)^2 and scales the result by 2^k in the exponent bits, with a
// different final combination for k = 0, k = -1, k < 23 and the rest.
// glibc's tanhf is built without fused multiply-adds: every product here is rounded on its
// own (mul), so the host compiler's contraction mode does not matter.
#define CUCC_INLINE_TANHF 1  // tells the test that the definition below is in use

namespace cucc {

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
    int rounded = (int)(mul(invln2, y) + half);
    int k =
        select(hy <= 0x3eb17218u, 0, select(hy < 0x3f851592u, select(negative, -1, 1), rounded));
    // k = +-1 is glibc's hi = y -+ ln2_hi, lo = +-ln2_lo: the same as the general form with t =
    // +-1 (a product with +-1 is exact); k = 0 gives hi = y, lo = 0, so r = y and c = 0.
    float t = (float)k;
    float hi = y - mul(t, ln2_hi);
    float lo = mul(t, ln2_lo);
    float r = hi - lo;
    float c = (hi - r) - lo;
    float hfx = mul(0.5f, r);
    float hxs = mul(r, hfx);
    float r1 = 1.0f + mul(hxs, q1 + mul(hxs, q2 + mul(hxs, q3 + mul(hxs, q4 + mul(hxs, q5)))));
    float t3 = 3.0f - mul(r1, hfx);
    float e = mul(hxs, (r1 - t3) / (6.0f - mul(r, t3)));
    float at_zero = r - (mul(r, e) - hxs);  // k == 0 (r is y)
    float e2 = mul(r, e - c) - c;
    e2 -= hxs;
    float at_minus_one = mul(0.5f, r - e2) - 0.5f;
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
    float twice = cucc::mul(2.0f, ax), minus_twice = cucc::mul(-2.0f, ax);
    float t = cucc::expm1f_for_tanhf(cucc::select(from_one, twice, minus_twice));
    // 1 - 2 / (t + 2) or -t / (t + 2): one division, its numerator selected
    float quotient = cucc::select(from_one, 2.0f, -t) / (t + 2.0f);
    float z = cucc::select(from_one, 1.0f - quotient, quotient);
    float minus_z = -z;
    float large = cucc::select(positive, 1.0f, -1.0f);
    // glibc's 1/x +- 1 without its division: +-1 at +-infinity (1/x is +-0), and at a NaN 1/x is
    // x quieted (sign and payload kept, as SSE's division gives it), which +- 1 leaves as it is
    float not_finite = cucc::select(ix > 0x7f800000u, cucc::bits_float(jx | 0x00400000u), large);
    float x_one_plus_x = cucc::mul(x, 1.0f + x);
    float tiny = cucc::select(ix == 0, x, x_one_plus_x);
    float in_range = cucc::select(positive, z, minus_z);
    return cucc::select(
        ix >= 0x7f800000u, not_finite,
        cucc::select(ix >= 0x41b00000u, large, cucc::select(main_range, in_range, tiny)));
}

// ---------------------------------------------------------------------------------------------
// expf. glibc's algorithm (the facts this reproduces): in double precision, z = x * 32/ln2 is
// rounded to an integer k (by adding and subtracting 1.5 * 2^52, which rounds to nearest even),
// r = z - k, and exp(x) = 2^(k/32) * 2^(r/32): 2^(k/32) is the table entry 2^((k mod 32)/32)
// with k div 32 added to its exponent, 2^(r/32) the cubic c0 r^3 + c1 r^2 + c2 r + 1 evaluated
// as (c0 r + c1) r^2 + (c2 r + 1); the product is rounded to float. The coefficients are a
// minimax fit of 2^r scaled by 1/32, 1/32^2, 1/32^3. For |x| >= 88 (or NaN): -inf gives 0,
// NaN and +inf give x + x, x > 88.72 (log 2^128) overflows to +inf and x < -103.97
// (log 2^-150) underflows to +0; the rest of that range goes through the same arithmetic.
// libm has two builds of it and picks one when the program starts: one compiled for FMA (where
// the processor has FMA and AVX2), in which the compiler fused every multiply-add (the two uses
// of z included: k = fma(x, 32/ln2, shift), r = fma(x, 32/ln2, -k)), and one without. This
// definition fuses the same operations when the target has FMA (cucc compiles for the build
// machine's processor: -march=native), so it matches the build libm picks there.
#define CUCC_INLINE_EXPF 1  // tells the test that the definition below is in use

namespace cucc {

// a * b + c as glibc's build for this target computes it: fused where the target has FMA.
__attribute__((always_inline)) inline double multiply_add(double a, double b, double c) {
#ifdef __FMA__
    return __builtin_fma(a, b, c);
#else
    return a * b + c;
#endif
}

// The bits of 2^(i/32), correctly rounded, less i << 47 (i/32 in the exponent field), so that
// adding k << 47 (k mod 32 = i) gives 2^(k/32).
alignas(64) constexpr uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

}  // namespace cucc

extern "C" __inline __attribute__((__gnu_inline__, __always_inline__)) float expf(
    float x) noexcept {
    // Decimal forms that round to glibc's hexadecimal constants (C++14 has no hexadecimal
    // floating literals): 32 / ln2 = 0x1.71547652b82fep+0 * 32, shift = 1.5 * 2^52, and the
    // cubic's 0x1.c6af84b912394p-5, 0x1.ebfce50fac4f3p-3 and 0x1.62e42ff0c52d6p-1 over 32^3,
    // 32^2 and 32 (exact divisions by powers of two).
    const double scale = 1.4426950408889634 * 32, shift = 6755399441055744.0;
    const double c0 = 0.05550361559341535 / (32.0 * 32.0 * 32.0),
                 c1 = 0.2402284522445722 / (32.0 * 32.0), c2 = 0.6931471806916203 / 32.0;
    const double xd = x;
    double kd = cucc::multiply_add(xd, scale, shift);
    const uint64_t ki = cucc::bits_as<uint64_t>(kd);  // k in the low bits
    kd -= shift;
    const double r = cucc::multiply_add(xd, scale, -kd);
    const double s = cucc::bits_as<double>(cucc::kExp2Table[ki % 32] + (ki << 47));
    const double p = cucc::multiply_add(c0, r, c1), r2 = r * r, q = cucc::multiply_add(c2, r, 1.0);
    const float in_range = (float)(cucc::multiply_add(p, r2, q) * s);
    // |x| >= 88 or NaN (the top 12 bits of x's magnitude at least 88's): every case selected
    const uint32_t bits = cucc::float_bits(x), top = bits >> 20 & 0x7ff;
    const float special = cucc::select(
        bits == 0xff800000u, 0.0f,
        cucc::select(top >= 0x7f8, x + x,
                     cucc::select(x > 88.72283172607421875f, __builtin_inff(),
                                  cucc::select(x < -103.972076416015625f, 0.0f, in_range))));
    return cucc::select(top >= 0x42b, special, in_range);
}

#endif  // glibc 2.36
