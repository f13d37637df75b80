// cucc's inline tanhf (cucc/tanhf.h) against glibc's libm tanhf: the inline one is evaluated in
// a kernel (as a GELU kernel calls it), libm's through a pointer the compiler cannot see
// through, and the two results must have the same bits. `./prog --all` compares every one of
// the 2^32 float inputs, NaN payloads and signed zeros included (about 2 CPU minutes); the suite
// runs every 67th bit pattern (a prime stride, so every low-bit residue and every exponent is
// visited). On glibc 2.36 the inline definition must be in use under cucc's default flags (else
// this test would compare libm with itself); on another glibc it is off by design (tanhf.h) and
// there is nothing to compare.
//! cpu-only
//! run: ./prog => pass
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "test_util.h"

constexpr uint32_t kChunk = 1u << 24;  // inputs per launch
constexpr uint32_t kPerThread = 64;    // consecutive inputs per thread, a loop it can vectorize

// out[i] = tanhf of the float whose bits are (first + i) * stride (mod 2^32).
__global__ void tanhf_kernel(float* out, uint32_t first, uint32_t stride) {
    uint32_t base = (blockIdx.x * blockDim.x + threadIdx.x) * kPerThread;
    for (uint32_t k = 0; k < kPerThread; k++) {
        uint32_t bits = (first + base + k) * stride;
        float x;
        memcpy(&x, &bits, 4);
        out[base + k] = tanhf(x);
    }
}

int main(int argc, char** argv) {
    const bool all = argc > 1 && strcmp(argv[1], "--all") == 0;
    const uint32_t stride = all ? 1 : 67;
    const uint64_t count = all ? (1ull << 32) : ((1ull << 32) / stride / kChunk + 1) * kChunk;
#ifdef CUCC_INLINE_TANHF
    expect(true, "cucc's inline tanhf is in use");
#elif defined(__GLIBC__) && __GLIBC__ == 2 && __GLIBC_MINOR__ == 36
    expect(false, "cucc's inline tanhf is in use", "CUCC_INLINE_TANHF is not defined");
#else
    printf("cucc's inline tanhf is off on this glibc (it reproduces 2.36's): nothing to compare\n");
    return test_report("cucc_tanhf_exact");
#endif
    float* out;
    CUDA_CHECK(cudaMallocManaged(&out, kChunk * sizeof(float)));
    float (*volatile libm_tanhf)(float) = tanhf;
    uint64_t mismatches = 0;
    uint32_t first_bad = 0, got_bits = 0, want_bits = 0;
    for (uint64_t first = 0; first < count; first += kChunk) {
        tanhf_kernel<<<kChunk / kPerThread / 256, 256>>>(out, (uint32_t)first, stride);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (uint32_t i = 0; i < kChunk; i++) {
            uint32_t bits = ((uint32_t)first + i) * stride, got, want;
            float x, w = 0.0f;
            memcpy(&x, &bits, 4);
            w = libm_tanhf(x);
            memcpy(&got, &out[i], 4);
            memcpy(&want, &w, 4);
            if (got != want && mismatches++ == 0) {
                first_bad = bits;
                got_bits = got;
                want_bits = want;
            }
        }
    }
    char detail[160];
    snprintf(detail, sizeof detail,
             "%llu of %llu inputs differ (bound 0); first at input 0x%08x: 0x%08x, glibc 0x%08x",
             (unsigned long long)mismatches, (unsigned long long)count, first_bad, got_bits,
             want_bits);
    expect(mismatches == 0,
           all ? "tanhf bits equal glibc's for every float input"
               : "tanhf bits equal glibc's for every 67th bit pattern",
           detail);
    CUDA_CHECK(cudaFree(out));
    return test_report("cucc_tanhf_exact");
}
