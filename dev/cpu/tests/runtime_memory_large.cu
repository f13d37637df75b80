// runtime_memory_large.cu: cudaMalloc of more than the machine's RAM succeeds when it is within
// what cudaMemGetInfo reports free (default limit 80 GiB per device), as on a GPU with that much
// memory: the runtime maps device memory without reserving it, so only touched pages cost RAM.
// Two allocations of 48 GiB and 24 GiB (72 GiB together), writes and reads at both ends of
// each, cudaMemGetInfo before, between and after, and a third allocation past the limit that
// must fail.
//! cpu-only
//! run: ./prog => pass /large allocations: right/
#include <cstdio>
#include <cstring>
#include "test_util.h"

// Writes a pattern to the first and last MiB of [p, p+bytes) and reads it back.
int check_ends(unsigned char* p, size_t bytes, unsigned char seed) {
    const size_t mib = 1 << 20;
    static unsigned char pattern[1 << 20], back[1 << 20];
    for (size_t off : {(size_t)0, bytes - mib}) {
        for (size_t i = 0; i < mib; i++) pattern[i] = (unsigned char)(seed + i * 7 + off);
        CUDA_CHECK(cudaMemcpy(p + off, pattern, mib, cudaMemcpyHostToDevice));
        memset(back, 0, mib);
        CUDA_CHECK(cudaMemcpy(back, p + off, mib, cudaMemcpyDeviceToHost));
        if (memcmp(back, pattern, mib) != 0) {
            printf("FAIL: the MiB at offset %zu of a %zu-byte allocation did not read back\n", off,
                   bytes);
            return 1;
        }
    }
    return 0;
}

int main() {
    const size_t gib = (size_t)1 << 30;
    size_t free0, total, free1, free2, free3;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    printf("cudaMemGetInfo: %zu GiB free of %zu GiB\n", free0 / gib, total / gib);
    if (free0 < 73 * gib) {
        printf("FAIL: want at least 73 GiB free (the default limit is 80 GiB)\n");
        return 1;
    }
    unsigned char *a, *b, *c = nullptr;
    CUDA_CHECK(cudaMalloc(&a, 48 * gib));
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    CUDA_CHECK(cudaMalloc(&b, 24 * gib));
    CUDA_CHECK(cudaMemGetInfo(&free2, &total));
    if (free0 - free1 != 48 * gib || free1 - free2 != 24 * gib) {
        printf("FAIL: free memory went %zu -> %zu -> %zu, want steps of 48 and 24 GiB\n", free0,
               free1, free2);
        return 1;
    }
    if (check_ends(a, 48 * gib, 1) || check_ends(b, 24 * gib, 2)) return 1;
    cudaError_t over = cudaMalloc(&c, free2 + 1);
    cudaGetLastError();
    if (over != cudaErrorMemoryAllocation || c != nullptr) {
        printf("FAIL: an allocation of %zu bytes with %zu free gave %s\n", free2 + 1, free2,
               cudaGetErrorName(over));
        return 1;
    }
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaMemGetInfo(&free3, &total));
    if (free3 != free0) {
        printf("FAIL: %zu bytes free after freeing everything, want %zu\n", free3, free0);
        return 1;
    }
    printf("large allocations: right\n");
    return 0;
}
