// Inline PTX mma.sync for every variant the CPU runtime runs: shapes m16n8k16 and m16n8k8, with
// .f32.bf16.bf16.f32, .f32.f16.f16.f32 and .f16.f16.f16.f16 types. Each lane builds its
// fragments from A (16xK), B (Kx8) and C (16x8) with the PTX ISA's tables ("Matrix Fragments for
// mma.m16n8k16 with floating point type", "Matrix Fragments for mma.m16n8k8"; written out below
// from the ISA text, independently of the runtime), and every element of every lane's D is
// compared with the host's product at the row and column the table gives it:
//   - exactly, for data whose products and sums are exact in every accumulator type;
//   - within the ISA's precision for random data: at least single precision (f32
//     accumulators) or half precision (f16), in an unspecified order, so the bound is
//     (K + 1) ulps-of-the-format of the sum of the terms' magnitudes.
// Also the "+f" form (C and D in the same registers) and a d/c pair in different registers.
//! run: ./prog => pass /all ptx_mma checks passed/
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "test_util.h"

enum Variant { K16_BF16, K16_F16, K16_F16ACC, K8_BF16, K8_F16, K8_F16ACC, NUM_VARIANTS };
static const char* const kNames[] = {
    "m16n8k16.row.col.f32.bf16.bf16.f32", "m16n8k16.row.col.f32.f16.f16.f32",
    "m16n8k16.row.col.f16.f16.f16.f16",   "m16n8k8.row.col.f32.bf16.bf16.f32",
    "m16n8k8.row.col.f32.f16.f16.f32",    "m16n8k8.row.col.f16.f16.f16.f16"};

__host__ __device__ int k_of(int v) { return v < K8_BF16 ? 16 : 8; }
__host__ __device__ bool is_bf16(int v) { return v == K16_BF16 || v == K8_BF16; }
__host__ __device__ bool f16_acc(int v) { return v == K16_F16ACC || v == K8_F16ACC; }

// The ISA's tables, groupID = lane >> 2, threadID_in_group = lane % 4; element i of a fragment
// sits in register i / 2, in the low half when i is even.
__host__ __device__ int a_row(int K, int lane, int i) {
    const int g = lane >> 2;
    if (K == 16) return (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    return i < 2 ? g : g + 8;
}
__host__ __device__ int a_col(int K, int lane, int i) {
    const int t = lane % 4;
    return t * 2 + (i & 1) + (K == 16 && i >= 4 ? 8 : 0);
}
__host__ __device__ int b_row(int K, int lane, int i) {
    const int t = lane % 4;
    return K == 16 ? t * 2 + (i & 1) + (i >= 2 ? 8 : 0) : t * 2 + i;
}
__host__ __device__ int b_col(int lane) { return lane >> 2; }
__host__ __device__ int c_row(int lane, int i) { return i < 2 ? lane >> 2 : (lane >> 2) + 8; }
__host__ __device__ int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

// 16-bit encodings of a float and back.
__host__ __device__ uint32_t bits16(float x, bool bf16) {
    if (bf16) {
        __nv_bfloat16 b = __float2bfloat16(x);
        uint16_t u;
        memcpy(&u, &b, 2);
        return u;
    }
    __half h = __float2half(x);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
__host__ __device__ float half_value(uint32_t reg, int hi) {
    uint16_t u = (uint16_t)(hi ? reg >> 16 : reg);
    __half h;
    memcpy(&h, &u, 2);
    return __half2float(h);
}

template <int V>
__device__ void mma(float* d, uint32_t* dh, const uint32_t* a, const uint32_t* b, const float* c,
                    const uint32_t* ch) {
    if constexpr (V == K16_BF16)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%10,%11,%12,%13};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
              "f"(c[1]), "f"(c[2]), "f"(c[3]));
    if constexpr (V == K16_F16) {  // the accumulate-in-place form
        for (int i = 0; i < 4; i++) d[i] = c[i];
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    if constexpr (V == K16_F16ACC)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
            "{%8,%9};"
            : "=r"(dh[0]), "=r"(dh[1])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(ch[0]),
              "r"(ch[1]));
    if constexpr (V == K8_BF16)
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%7,%8,%9,%10};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    if constexpr (V == K8_F16)
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%7,%8,%9,%10};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    if constexpr (V == K8_F16ACC)
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
            : "=r"(dh[0]), "=r"(dh[1])
            : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(ch[0]), "r"(ch[1]));
}

// One warp: A is 16xK, B Kx8, C 16x8, all row-major floats; out[lane * 4 + i] = lane's d_i.
template <int V>
__global__ void mma_kernel(const float* A, const float* B, const float* C, float* out) {
    const int lane = threadIdx.x, K = k_of(V);
    const bool bf16 = is_bf16(V);
    uint32_t a[4] = {}, b[2] = {}, ch[2] = {}, dh[2] = {};
    float c[4], d[4];
    for (int i = 0; i < K / 2; i++)
        a[i / 2] |= bits16(A[a_row(K, lane, i) * K + a_col(K, lane, i)], bf16) << (16 * (i & 1));
    for (int i = 0; i < K / 4; i++)
        b[i / 2] |= bits16(B[b_row(K, lane, i) * 8 + b_col(lane)], bf16) << (16 * (i & 1));
    for (int i = 0; i < 4; i++) {
        c[i] = C[c_row(lane, i) * 8 + c_col(lane, i)];
        ch[i / 2] |= bits16(c[i], false) << (16 * (i & 1));
    }
    mma<V>(d, dh, a, b, c, ch);
    for (int i = 0; i < 4; i++)
        out[lane * 4 + i] = f16_acc(V) ? half_value(dh[i / 2], i & 1) : d[i];
}

template <int V>
void launch(const float* A, const float* B, const float* C, float* out) {
    mma_kernel<V><<<1, 32>>>(A, B, C, out);
}

// Runs variant v on A, B, C; checks every element of every lane against the host product.
// exact: the results must be exact; else within the ISA's accumulation precision.
static void check(int v, const std::vector<float>& A, const std::vector<float>& B,
                  const std::vector<float>& C, bool exact) {
    const int K = k_of(v);
    float *dA, *dB, *dC, *dOut;
    CUDA_CHECK(cudaMalloc(&dA, A.size() * 4));
    CUDA_CHECK(cudaMalloc(&dB, B.size() * 4));
    CUDA_CHECK(cudaMalloc(&dC, C.size() * 4));
    CUDA_CHECK(cudaMalloc(&dOut, 128 * 4));
    CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dOut, 0xff, 128 * 4));
    void (*launchers[])(const float*, const float*, const float*, float*) = {
        launch<K16_BF16>, launch<K16_F16>, launch<K16_F16ACC>,
        launch<K8_BF16>,  launch<K8_F16>,  launch<K8_F16ACC>};
    launchers[v](dA, dB, dC, dOut);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out(128);
    CUDA_CHECK(cudaMemcpy(out.data(), dOut, 128 * 4, cudaMemcpyDeviceToHost));
    // the format's unit of the accumulation: f32, or f16 (2^-10)
    const double ulp = f16_acc(v) ? 0x1p-10 : 0x1p-23;
    int bad = 0;
    double worst = 0.0;
    std::string first;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const int r = c_row(lane, i), col = c_col(lane, i);
            // the inputs as the mma sees them: rounded to the operand type (and C to f16)
            auto in = [&](float x, bool bf) {
                return bf ? (double)__bfloat162float(__float2bfloat16(x))
                          : (double)__half2float(__float2half(x));
            };
            double c = f16_acc(v) ? in(C[r * 8 + col], false) : (double)C[r * 8 + col];
            double ref = c, mag = fabs(c);
            for (int k = 0; k < K; k++) {
                const double term = in(A[r * K + k], is_bf16(v)) * in(B[k * 8 + col], is_bf16(v));
                ref += term;
                mag += fabs(term);
            }
            if (f16_acc(v)) ref = (double)__half2float(__float2half((float)ref));
            const double err = fabs((double)out[lane * 4 + i] - ref);
            const double bound = exact ? 0.0 : (K + 1) * ulp * mag;
            worst = std::max(worst, bound > 0 ? err / bound : err);
            if (!(err <= bound)) {
                if (!bad++) {
                    char s[160];
                    snprintf(s, sizeof s, "lane %d d%d (row %d, col %d) = %g, host %g", lane, i, r,
                             col, out[lane * 4 + i], ref);
                    first = s;
                }
            }
        }
    char what[160], detail[200];
    snprintf(what, sizeof what, "mma.sync.aligned.%s, %s data", kNames[v],
             exact ? "exact" : "random");
    if (bad)
        snprintf(detail, sizeof detail, "%d of 128 elements wrong, first: %s", bad, first.c_str());
    else
        snprintf(detail, sizeof detail, exact ? "128 elements exact" : "worst err/bound %.3f",
                 worst);
    expect(bad == 0, what, detail);
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
    CUDA_CHECK(cudaFree(dOut));
}

int main() {
    uint64_t state = 12345;
    auto next = [&]() {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return (uint32_t)(state >> 33);
    };
    for (int v = 0; v < NUM_VARIANTS; v++) {
        const int K = k_of(v);
        std::vector<float> A(16 * K), B(K * 8), C(16 * 8);
        // exact: multiples of 1/4 in [-2, 2] (products are multiples of 1/16 of at most 4, sums
        // of at most 17 terms stay far inside f16's 11 significant bits)
        for (float& x : A) x = (float)((int)(next() % 17) - 8) / 4.0f;
        for (float& x : B) x = (float)((int)(next() % 17) - 8) / 4.0f;
        for (float& x : C) x = (float)((int)(next() % 33) - 16) / 4.0f;
        check(v, A, B, C, true);
        for (float& x : A) x = (float)(next() % 2000001) / 1e6f - 1.0f;
        for (float& x : B) x = (float)(next() % 2000001) / 1e6f - 1.0f;
        for (float& x : C) x = (float)(next() % 2000001) / 1e6f - 1.0f;
        check(v, A, B, C, false);
    }
    return test_report("ptx_mma");
}
