// cucc's inline tanhf (cucc/tanhf.h) against glibc's libm tanhf for every one of the 2^32 float
// inputs, NaN payloads and signed zeros included: the inline one is evaluated in a kernel (as a
// GELU kernel calls it), libm's through a pointer the compiler cannot see through, and the two
// results must have the same bits. The inline definition must be in use under cucc's default
// flags (else this test would compare libm with itself).
//! cpu-only
//! run: ./prog => pass
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "test_util.h"

constexpr uint32_t kChunk = 1u << 24;  // inputs per launch
constexpr uint32_t kPerThread = 64;    // consecutive inputs per thread, a loop it can vectorize

// out[i] = tanhf of the float whose bits are first + i.
__global__ void tanhf_kernel(float* out, uint32_t first) {
    uint32_t base = (blockIdx.x * blockDim.x + threadIdx.x) * kPerThread;
    for (uint32_t k = 0; k < kPerThread; k++) {
        uint32_t bits = first + base + k;
        float x;
        memcpy(&x, &bits, 4);
        out[base + k] = tanhf(x);
    }
}

int main() {
#ifdef CUCC_INLINE_TANHF
    expect(true, "cucc's inline tanhf is in use");
#else
    expect(false, "cucc's inline tanhf is in use", "CUCC_INLINE_TANHF is not defined");
#endif
    float* out;
    CUDA_CHECK(cudaMallocManaged(&out, kChunk * sizeof(float)));
    float (*volatile libm_tanhf)(float) = tanhf;
    uint64_t mismatches = 0;
    uint32_t first_bad = 0, got_bits = 0, want_bits = 0;
    for (uint64_t first = 0; first < (1ull << 32); first += kChunk) {
        tanhf_kernel<<<kChunk / kPerThread / 256, 256>>>(out, (uint32_t)first);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (uint32_t i = 0; i < kChunk; i++) {
            uint32_t bits = (uint32_t)first + i, got, want;
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
             "%llu of 4294967296 differ (bound 0); first at input 0x%08x: 0x%08x, glibc 0x%08x",
             (unsigned long long)mismatches, first_bad, got_bits, want_bits);
    expect(mismatches == 0, "tanhf bits equal glibc's for every float input", detail);
    CUDA_CHECK(cudaFree(out));
    return test_report("cucc_tanhf_exact");
}
