// Device intrinsics computed in a kernel and compared with independent host computations:
// bit reinterpretation, integer intrinsics (__popc, __clz, __ffs, __brev, __byte_perm,
// __umulhi, funnel shifts), float-to-int conversions with each rounding and saturation,
// __saturatef, bf16 rounding to nearest even, __hfma rounding once (a case where rounding to
// float first would give a different bf16), and fp8 conversions with and without saturation.
//! run: ./prog => pass
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "test_util.h"

const int kInts = 16;

// Integer intrinsics of one input pair (x, y) per thread.
__global__ void int_kernel(const unsigned* xs, const unsigned* ys, long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = xs[i], y = ys[i];
    long long* o = out + (size_t)i * kInts;
    o[0] = __popc(x);
    o[1] = __clz((int)x);
    o[2] = __ffs((int)x);
    o[3] = __brev(x);
    o[4] = __byte_perm(x, y, 0x5140);
    o[5] = __umulhi(x, y);
    o[6] = __funnelshift_l(x, y, y % 40);
    o[7] = __funnelshift_r(x, y, y % 40);
    o[8] = __float_as_uint(__uint_as_float(x));
    o[9] = __popcll(((unsigned long long)x << 32) | y);
    o[10] = __clzll((long long)(((unsigned long long)x << 32) | y));
    o[11] = __float_as_int(__int_as_float((int)y));
    o[12] = __mulhi((int)x, (int)y);
    o[13] = __usad(x, y, 5u);
    o[14] = __double_as_longlong(__longlong_as_double((long long)x << 20));
    o[15] = __brevll(((unsigned long long)x << 32) | y) >> 3;
}

// Float conversions of one input per thread.
__global__ void float_kernel(const float* xs, int* out, float* fout, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = xs[i];
    out[i * 5 + 0] = __float2int_rn(x);
    out[i * 5 + 1] = __float2int_rz(x);
    out[i * 5 + 2] = __float2int_rd(x);
    out[i * 5 + 3] = __float2int_ru(x);
    out[i * 5 + 4] = (int)__float2uint_rn(x);
    fout[i] = __saturatef(x);
}

// bf16 rounding, __hfma and fp8 conversions of one input per thread.
__global__ void low_precision_kernel(const float* xs, unsigned short* bf, unsigned char* e4m3_sat,
                                     unsigned char* e4m3_nosat, unsigned char* e5m2_sat, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 b = __float2bfloat16_rn(xs[i]);
    bf[i] = *reinterpret_cast<unsigned short*>(&b);
    e4m3_sat[i] = __nv_cvt_float_to_fp8(xs[i], __NV_SATFINITE, __NV_E4M3);
    e4m3_nosat[i] = __nv_cvt_float_to_fp8(xs[i], __NV_NOSAT, __NV_E4M3);
    e5m2_sat[i] = __nv_cvt_float_to_fp8(xs[i], __NV_SATFINITE, __NV_E5M2);
}

__global__ void fma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* c,
                           __nv_bfloat16* out, float4* fp8_roundtrip, const float4* fp8_in, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = __hfma(a[i], b[i], c[i]);
    if (i == 0) {
        __nv_fp8x4_e4m3 q(fp8_in[0]);
        fp8_roundtrip[0] = float4(q);
        __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(fp8_in[0].x, fp8_in[0].y),
                                                             __NV_SATFINITE, __NV_E4M3);
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
        __half_raw lo, hi;  // the pair's halves as raw bits
        lo.x = h.x;
        hi.x = h.y;
        fp8_roundtrip[1] =
            make_float4(__half2float(__half(lo)), __half2float(__half(hi)), 0.0f, 0.0f);
    }
}

// ---- host references, written from the definitions ----
int popcount(unsigned long long x) {
    int n = 0;
    for (; x; x >>= 1) n += x & 1;
    return n;
}
int leading_zeros(unsigned long long x, int bits) {
    int n = 0;
    for (int b = bits - 1; b >= 0 && !(x >> b & 1); b--) n++;
    return n;
}
unsigned long long reverse_bits(unsigned long long x, int bits) {
    unsigned long long r = 0;
    for (int b = 0; b < bits; b++)
        if (x >> b & 1) r |= 1ull << (bits - 1 - b);
    return r;
}

// Round to nearest even onto a grid: the representable neighbours lo < v < hi are given.
double nearest_even(double v, double lo, double hi, bool lo_is_even) {
    if (v - lo < hi - v) return lo;
    if (hi - v < v - lo) return hi;
    return lo_is_even ? lo : hi;
}

// float -> bf16 bits by value: bf16 keeps 8 significant bits.
unsigned short bf16_reference(float x) {
    if (x == 0.0f) return std::signbit(x) ? 0x8000 : 0;
    int e;
    double m = std::frexp(std::fabs((double)x), &e);  // |x| = m * 2^e, m in [0.5, 1)
    double scaled = m * 256.0, lo = std::floor(scaled);
    double r = nearest_even(scaled, lo, lo + 1.0, std::fmod(lo, 2.0) == 0.0);
    float v = (float)std::ldexp(r, e - 8);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return (unsigned short)((bits >> 16) | (x < 0 ? 0x8000 : 0));
}

// float -> e4m3 value: 4 significant bits, normal exponents down to -6, subnormals step 2^-9,
// largest finite 448; NaN when out of range without saturation.
double e4m3_reference(double x, bool saturate, bool* is_nan) {
    *is_nan = false;
    double a = std::fabs(x), step;
    if (a < std::ldexp(1.0, -6)) step = std::ldexp(1.0, -9);
    else {
        int e;
        std::frexp(a, &e);
        step = std::ldexp(1.0, e - 4);
    }
    double lo = std::floor(a / step) * step;
    double r = nearest_even(a, lo, lo + step, std::fmod(lo / step, 2.0) == 0.0);
    if (r > 448.0) {
        if (saturate) r = 448.0;
        else *is_nan = true;
    }
    return x < 0 ? -r : r;
}

int main() {
    int failures = 0;
    const int n = 200;
    std::vector<unsigned> xs(n), ys(n);
    srand(9);
    for (int i = 0; i < n; i++) {
        xs[i] = ((unsigned)rand() << 16) ^ (unsigned)rand();
        ys[i] = ((unsigned)rand() << 16) ^ (unsigned)rand();
        if (i % 17 == 0) xs[i] = 0;
        if (i % 19 == 0) xs[i] >>= (i % 32);
    }
    unsigned *d_x, *d_y;
    long long* d_o;
    CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&d_y, n * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&d_o, n * kInts * sizeof(long long)));
    CUDA_CHECK(cudaMemcpy(d_x, xs.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_y, ys.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    int_kernel<<<(n + 63) / 64, 64>>>(d_x, d_y, d_o, n);
    CUDA_CHECK(cudaGetLastError());
    std::vector<long long> o(n * kInts);
    CUDA_CHECK(cudaMemcpy(o.data(), d_o, o.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        unsigned x = xs[i], y = ys[i];
        unsigned long long xy = ((unsigned long long)x << 32) | y;
        unsigned char bytes[8];
        for (int k = 0; k < 4; k++) {
            bytes[k] = x >> (8 * k);
            bytes[4 + k] = y >> (8 * k);
        }
        unsigned perm = 0;
        for (int k = 0; k < 4; k++) perm |= (unsigned)bytes[(0x5140 >> (4 * k)) & 7] << (8 * k);
        int ffs = 0;
        for (int b = 0; b < 32; b++)
            if (x >> b & 1) {
                ffs = b + 1;
                break;
            }
        unsigned s = y % 40 % 32;
        long long want[kInts] = {popcount(x),
                                 leading_zeros(x, 32),
                                 ffs,
                                 (long long)reverse_bits(x, 32),
                                 perm,
                                 (long long)(((unsigned long long)x * y) >> 32),
                                 (long long)(unsigned)(s ? (y << s) | (x >> (32 - s)) : y),
                                 (long long)(unsigned)(s ? (x >> s) | (y << (32 - s)) : x),
                                 x,
                                 popcount(xy),
                                 leading_zeros(xy, 64),
                                 (int)y,
                                 (long long)(((long long)(int)x * (long long)(int)y) >> 32),
                                 (long long)5 + (x > y ? x - y : y - x),
                                 (long long)x << 20,
                                 (long long)(reverse_bits(xy, 64) >> 3)};
        for (int k = 0; k < kInts; k++)
            if (o[i * kInts + k] != want[k]) {
                if (failures < 20)
                    printf("int intrinsic %d of (%08x, %08x): got %llx, want %llx\n", k, x, y,
                           (unsigned long long)o[i * kInts + k], (unsigned long long)want[k]);
                failures++;
            }
    }

    std::vector<float> fx = {2.5f,  3.5f,   -2.5f, -0.5f, 0.5f, 1.49999988f, -1.5f, 7.0f,
                             1e10f, -1e10f, NAN,   0.25f, 1.5f, -0.0f,       3e9f,  0.75f};
    const int nf = (int)fx.size();
    float *d_fx, *d_fo;
    int* d_io;
    CUDA_CHECK(cudaMalloc(&d_fx, nf * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_fo, nf * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_io, nf * 5 * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_fx, fx.data(), nf * sizeof(float), cudaMemcpyHostToDevice));
    float_kernel<<<1, nf>>>(d_fx, d_io, d_fo, nf);
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> io(nf * 5);
    std::vector<float> fo(nf);
    CUDA_CHECK(cudaMemcpy(io.data(), d_io, io.size() * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(fo.data(), d_fo, nf * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < nf; i++) {
        double x = fx[i];
        auto sat = [](double v, double lo, double hi) {
            return std::isnan(v) ? 0.0 : v < lo ? lo : v > hi ? hi : v;
        };
        double lo = std::floor(x), even = nearest_even(x, lo, lo + 1, std::fmod(lo, 2.0) == 0.0);
        double want[5] = {sat(even, INT32_MIN, INT32_MAX), sat(std::trunc(x), INT32_MIN, INT32_MAX),
                          sat(std::floor(x), INT32_MIN, INT32_MAX),
                          sat(std::ceil(x), INT32_MIN, INT32_MAX),
                          (double)(int)(unsigned)sat(even, 0, UINT32_MAX)};
        for (int k = 0; k < 5; k++)
            if (io[i * 5 + k] != (int)want[k]) {
                printf("float conversion %d of %g: got %d, want %d\n", k, x, io[i * 5 + k],
                       (int)want[k]);
                failures++;
            }
        double s = std::isnan(x) ? 0.0 : x < 0 ? 0.0 : x > 1 ? 1.0 : x;
        if (fo[i] != (float)s || std::signbit(fo[i])) {
            printf("__saturatef(%g) = %g, want %g\n", x, fo[i], s);
            failures++;
        }
    }

    // bf16 and fp8: ties, values near the top of the fp8 ranges, subnormals, random values.
    std::vector<float> lx = {
        1.0f,    1.00390625f, 1.01171875f,  -1.00390625f,  3.0e38f,  1e-40f,   0.0f,
        -0.0f,   1.0625f,     1.1875f,      448.0f,        464.0f,   479.0f,   480.0f,
        1000.0f, -1000.0f,    0.001953125f, 0.0029296875f, 57344.0f, 61440.0f, 1e6f};
    for (int i = 0; i < 200; i++)
        lx.push_back(((float)rand() / RAND_MAX - 0.5f) * std::ldexp(1.0f, rand() % 30 - 15));
    const int nl = (int)lx.size();
    float* d_lx;
    unsigned short* d_bf;
    unsigned char *d_q1, *d_q2, *d_q3;
    CUDA_CHECK(cudaMalloc(&d_lx, nl * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_bf, nl * sizeof(unsigned short)));
    CUDA_CHECK(cudaMalloc(&d_q1, nl));
    CUDA_CHECK(cudaMalloc(&d_q2, nl));
    CUDA_CHECK(cudaMalloc(&d_q3, nl));
    CUDA_CHECK(cudaMemcpy(d_lx, lx.data(), nl * sizeof(float), cudaMemcpyHostToDevice));
    low_precision_kernel<<<(nl + 63) / 64, 64>>>(d_lx, d_bf, d_q1, d_q2, d_q3, nl);
    CUDA_CHECK(cudaGetLastError());
    std::vector<unsigned short> bf(nl);
    std::vector<unsigned char> q1(nl), q2(nl), q3(nl);
    CUDA_CHECK(cudaMemcpy(bf.data(), d_bf, nl * sizeof(unsigned short), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(q1.data(), d_q1, nl, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(q2.data(), d_q2, nl, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(q3.data(), d_q3, nl, cudaMemcpyDeviceToHost));
    auto e4m3_value = [](unsigned char q) {
        int e = q >> 3 & 15, m = q & 7;
        double v = e ? std::ldexp(1.0 + m / 8.0, e - 7) : std::ldexp(m / 8.0, -6);
        return q & 0x80 ? -v : v;
    };
    auto e5m2_value = [](unsigned char q) {
        int e = q >> 2 & 31, m = q & 3;
        double v = e ? std::ldexp(1.0 + m / 4.0, e - 15) : std::ldexp(m / 4.0, -14);
        return q & 0x80 ? -v : v;
    };
    for (int i = 0; i < nl; i++) {
        unsigned short wb = bf16_reference(lx[i]);
        if (bf[i] != wb) {
            printf("__float2bfloat16_rn(%.9g) = %04x, want %04x\n", lx[i], bf[i], wb);
            failures++;
        }
        bool nan;
        double want_sat = e4m3_reference(lx[i], true, &nan);
        double want_nosat = e4m3_reference(lx[i], false, &nan);
        bool got_nan = (q2[i] & 0x7f) == 0x7f;
        if (e4m3_value(q1[i]) != want_sat || got_nan != nan ||
            (!nan && e4m3_value(q2[i]) != want_nosat)) {
            printf("fp8 e4m3 of %.9g: %02x (sat) %02x (nosat), want %g / %s\n", lx[i], q1[i], q2[i],
                   want_sat, nan ? "NaN" : "finite");
            failures++;
        }
        // e5m2: 3 significant bits, largest finite 57344
        double a = std::fabs((double)lx[i]);
        int e;
        std::frexp(a, &e);
        double step = a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -16) : std::ldexp(1.0, e - 3);
        double lo = std::floor(a / step) * step;
        double r = nearest_even(a, lo, lo + step, std::fmod(lo / step, 2.0) == 0.0);
        r = r > 57344.0 ? 57344.0 : r;
        if (e5m2_value(q3[i]) != (lx[i] < 0 ? -r : r)) {
            printf("fp8 e5m2 of %.9g: %02x = %g, want %g\n", lx[i], q3[i], e5m2_value(q3[i]),
                   lx[i] < 0 ? -r : r);
            failures++;
        }
    }

    // __hfma: 1.0625 * 1.0625 = 1.12890625 lies exactly between the bf16 values 1.125 and
    // 1.1328125; adding +-2^-30 decides the rounding, but is lost if a*b+c is rounded to float
    // first (the tie would then go to the even 1.125).
    std::vector<__nv_bfloat16> a(4, __float2bfloat16(1.0625f)), b = a, c(4), out(4);
    float cs[4] = {std::ldexp(1.0f, -30), -std::ldexp(1.0f, -30), 0.0f, 0.5f};
    float want_fma[4] = {1.1328125f, 1.125f, 1.125f, 1.625f};
    for (int i = 0; i < 4; i++) c[i] = __float2bfloat16(cs[i]);
    __nv_bfloat16 *d_a, *d_b, *d_c, *d_out;
    float4 *d_q, *d_qin;
    CUDA_CHECK(cudaMalloc(&d_a, 4 * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&d_b, 4 * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&d_c, 4 * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&d_out, 4 * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&d_q, 2 * sizeof(float4)));
    CUDA_CHECK(cudaMalloc(&d_qin, sizeof(float4)));
    float4 qin = make_float4(1.0625f, -1.1875f, 500.0f, 0.013f);
    CUDA_CHECK(cudaMemcpy(d_a, a.data(), 4 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_b, b.data(), 4 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_c, c.data(), 4 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_qin, &qin, sizeof(float4), cudaMemcpyHostToDevice));
    fma_kernel<<<1, 32>>>(d_a, d_b, d_c, d_out, d_q, d_qin, 4);
    CUDA_CHECK(cudaGetLastError());
    float4 q[2];
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, 4 * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(q, d_q, sizeof(q), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4; i++)
        if (__bfloat162float(out[i]) != want_fma[i]) {
            printf("__hfma(1.0625, 1.0625, %g) = %.9g, want %.9g\n", cs[i],
                   __bfloat162float(out[i]), want_fma[i]);
            failures++;
        }
    bool nan;
    float want_q[4] = {
        (float)e4m3_reference(qin.x, true, &nan), (float)e4m3_reference(qin.y, true, &nan),
        (float)e4m3_reference(qin.z, true, &nan), (float)e4m3_reference(qin.w, true, &nan)};
    if (q[0].x != want_q[0] || q[0].y != want_q[1] || q[0].z != want_q[2] || q[0].w != want_q[3] ||
        q[1].x != want_q[0] || q[1].y != want_q[1]) {
        printf("fp8x4/x2 round trip: (%g %g %g %g) (%g %g), want (%g %g %g %g)\n", q[0].x, q[0].y,
               q[0].z, q[0].w, q[1].x, q[1].y, want_q[0], want_q[1], want_q[2], want_q[3]);
        failures++;
    }
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
