// Out of memory: a cudaMalloc larger than the free device memory fails with
// cudaErrorMemoryAllocation, without crashing; the error is not sticky,
// cudaMemGetInfo's free memory shrinks by what was allocated, and smaller allocations still work.
// Under the CPU runtime CUCC_MEM_LIMIT sets the device size: 2 GiB here, because device memory
// is committed host memory there and half of the default size (what the machine has
// available) would take seconds per GiB to commit; runtime_memory_commit.cu checks the default.
//! run: CUCC_MEM_LIMIT=2G ./prog => pass
//! run: CUCC_MEM_LIMIT=64M ./prog => pass /total 64 MiB/
#include <cstdio>

int main() {
    int failures = 0;
    size_t free0, total;
    if (cudaMemGetInfo(&free0, &total) != cudaSuccess) {
        printf("cudaMemGetInfo failed\n");
        return 1;
    }
    printf("total %zu MiB, free %zu MiB\n", total >> 20, free0 >> 20);

    void* big = nullptr;
    cudaError_t err = cudaMalloc(&big, free0 + (size_t(1) << 30));
    printf("cudaMalloc(free + 1 GiB) -> %s\n", cudaGetErrorName(err));
    if (err != cudaErrorMemoryAllocation) failures++;
    if (cudaGetLastError() != cudaErrorMemoryAllocation || cudaGetLastError() != cudaSuccess) {
        printf("  cudaGetLastError did not report the error exactly once\n");
        failures++;
    }

    // Half the memory in 4 pieces fits; the free memory reported drops by at least that much.
    void* pieces[4];
    size_t piece = free0 / 8;
    for (void*& p : pieces) {
        if (cudaMalloc(&p, piece) != cudaSuccess) {
            printf("cudaMalloc of %zu MiB failed after the failed allocation\n", piece >> 20);
            return 1;
        }
    }
    size_t free1;
    cudaMemGetInfo(&free1, &total);
    printf("after 4 x %zu MiB: free %zu MiB\n", piece >> 20, free1 >> 20);
    if (free1 > free0 - 4 * piece) failures++;
    // What is left cannot hold 5/8 of the memory.
    void* rest = nullptr;
    err = cudaMalloc(&rest, free0 / 8 * 5);
    printf("then cudaMalloc(5/8 of it) -> %s\n", cudaGetErrorName(err));
    if (err != cudaErrorMemoryAllocation) failures++;
    cudaGetLastError();
    for (void* p : pieces)
        if (cudaFree(p) != cudaSuccess) failures++;
    size_t free2;
    cudaMemGetInfo(&free2, &total);
    if (free2 < free0 - (free0 >> 6)) {
        printf("free memory did not come back after cudaFree: %zu MiB\n", free2 >> 20);
        failures++;
    }
    printf("%s: %d failures\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
