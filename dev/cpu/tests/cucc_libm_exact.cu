// cucc's inline tanhf and expf (cucc/libm.h) against glibc's libm: the inline ones are evaluated
// in a kernel (as GELU and attention kernels call them), libm's through pointers the compiler
// cannot see through, and the results must have the same bits. `./prog --all` compares every
// one of the 2^32 float inputs of each, NaN payloads and signed zeros included (a few CPU
// minutes); the suite runs every 67th bit pattern (a prime stride, so every low-bit residue and
// every exponent is visited). On glibc 2.36 the inline definitions must be in use under cucc's
// default flags (else this test would compare libm with itself); on another glibc they are off
// by design (libm.h) and there is nothing to compare.
//! cpu-only
//! run: ./prog => pass
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "test_util.h"

constexpr uint32_t kChunk = 1u << 24;  // inputs per launch
constexpr uint32_t kPerThread = 64;    // consecutive inputs per thread, a loop it can vectorize

enum Function { kTanhf, kExpf };

// out[i] = f of the float whose bits are (first + i) * stride (mod 2^32).
template <Function f>
__global__ void libm_kernel(float* out, uint32_t first, uint32_t stride) {
    uint32_t base = (blockIdx.x * blockDim.x + threadIdx.x) * kPerThread;
    for (uint32_t k = 0; k < kPerThread; k++) {
        uint32_t bits = (first + base + k) * stride;
        float x;
        memcpy(&x, &bits, 4);
        out[base + k] = f == kTanhf ? tanhf(x) : expf(x);
    }
}

// Compares f in a kernel with libm's `reference` over `count` inputs of the given stride.
template <Function f>
void compare(const char* name, float (*reference)(float), float* out, uint64_t count,
             uint32_t stride, bool all) {
    uint64_t mismatches = 0;
    uint32_t first_bad = 0, got_bits = 0, want_bits = 0;
    for (uint64_t first = 0; first < count; first += kChunk) {
        libm_kernel<f><<<kChunk / kPerThread / 256, 256>>>(out, (uint32_t)first, stride);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (uint32_t i = 0; i < kChunk; i++) {
            uint32_t bits = ((uint32_t)first + i) * stride, got, want;
            float x, w;
            memcpy(&x, &bits, 4);
            w = reference(x);
            memcpy(&got, &out[i], 4);
            memcpy(&want, &w, 4);
            if (got != want && mismatches++ == 0) {
                first_bad = bits;
                got_bits = got;
                want_bits = want;
            }
        }
    }
    char what[96], detail[160];
    snprintf(what, sizeof what, "%s bits equal glibc's for %s", name,
             all ? "every float input" : "every 67th bit pattern");
    snprintf(detail, sizeof detail,
             "%llu of %llu inputs differ (bound 0); first at input 0x%08x: 0x%08x, glibc 0x%08x",
             (unsigned long long)mismatches, (unsigned long long)count, first_bad, got_bits,
             want_bits);
    expect(mismatches == 0, what, detail);
}

int main(int argc, char** argv) {
    const bool all = argc > 1 && strcmp(argv[1], "--all") == 0;
    const uint32_t stride = all ? 1 : 67;
    const uint64_t count = all ? (1ull << 32) : ((1ull << 32) / stride / kChunk + 1) * kChunk;
#if defined(__GLIBC__) && __GLIBC__ == 2 && __GLIBC_MINOR__ == 36
#ifdef CUCC_INLINE_TANHF
    expect(true, "cucc's inline tanhf is in use");
#else
    expect(false, "cucc's inline tanhf is in use", "CUCC_INLINE_TANHF is not defined");
#endif
#ifdef CUCC_INLINE_EXPF
    expect(true, "cucc's inline expf is in use");
#else
    expect(false, "cucc's inline expf is in use", "CUCC_INLINE_EXPF is not defined");
#endif
#else
    printf("cucc's inline tanhf and expf are off on this glibc (they reproduce 2.36's)\n");
    return test_report("cucc_libm_exact");
#endif
    float* out;
    CUDA_CHECK(cudaMallocManaged(&out, kChunk * sizeof(float)));
    float (*volatile libm_tanhf)(float) = tanhf;
    float (*volatile libm_expf)(float) = expf;
    compare<kTanhf>("tanhf", libm_tanhf, out, count, stride, all);
    compare<kExpf>("expf", libm_expf, out, count, stride, all);
    CUDA_CHECK(cudaFree(out));
    return test_report("cucc_libm_exact");
}
