// Launch errors, as CUDA reports them: more than 1024 threads per block, a block or grid
// dimension over its limit, a zero dimension, dynamic shared memory over 48 KiB without
// cudaFuncAttributeMaxDynamicSharedMemorySize (and accepted with it, up to the value set).
// After each rejected launch: cudaGetLastError returns the error once (it is not sticky), the
// device still synchronizes cleanly, the kernel did not run, and the next launch works.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include "test_util.h"

__global__ void flag_kernel(int* flag) {
    if (threadIdx.x + threadIdx.y + threadIdx.z + blockIdx.x + blockIdx.y + blockIdx.z == 0)
        *flag = 1;
}

// Fills all of its dynamic shared memory and checks it reads back; sets *flag to 1 if so.
__global__ void smem_kernel(int* flag, int words) {
    extern __shared__ int buf[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = i * 7;
    __syncthreads();
    int ok = 1;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
        ok &= buf[(i + 1) % words] == ((i + 1) % words) * 7;
    if (__syncthreads_and(ok) && threadIdx.x == 0) *flag = 1;
}

int failures = 0;
int* d_flag;

int read_flag() {
    int v;
    CUDA_CHECK(cudaMemcpy(&v, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
    return v;
}

// The launch just made must have failed with `want`, without running; then the state must be
// clean and a valid launch must work.
void expect_rejected(const char* what, cudaError_t want) {
    cudaError_t got = cudaGetLastError();
    cudaError_t again = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    int ran = read_flag();
    printf("%-44s -> %s\n", what, cudaGetErrorName(got));
    if (got != want) {
        printf("  expected %s\n", cudaGetErrorName(want));
        failures++;
    }
    if (again != cudaSuccess || sync != cudaSuccess) {
        printf("  the error is sticky: then %s, synchronize %s\n", cudaGetErrorName(again),
               cudaGetErrorName(sync));
        failures++;
    }
    if (ran) {
        printf("  the rejected kernel ran\n");
        failures++;
    }
    flag_kernel<<<1, 1>>>(d_flag);  // a good launch still works afterwards
    cudaError_t after = cudaGetLastError();
    if (after != cudaSuccess || read_flag() != 1) {
        printf("  a valid launch after it failed: %s\n", cudaGetErrorName(after));
        failures++;
    }
    CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
}

int main() {
    CUDA_CHECK(cudaMalloc(&d_flag, sizeof(int)));
    CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
    const cudaError_t config = cudaErrorInvalidConfiguration;

    flag_kernel<<<1, 1025>>>(d_flag);
    expect_rejected("1025 threads", config);
    flag_kernel<<<1, dim3(32, 33)>>>(d_flag);
    expect_rejected("32 x 33 threads", config);
    flag_kernel<<<1, dim3(1, 1025)>>>(d_flag);
    expect_rejected("block y = 1025", config);
    flag_kernel<<<1, dim3(1, 1, 65)>>>(d_flag);
    expect_rejected("block z = 65", config);
    flag_kernel<<<dim3(1, 65536), 1>>>(d_flag);
    expect_rejected("grid y = 65536", config);
    flag_kernel<<<dim3(1, 1, 65536), 1>>>(d_flag);
    expect_rejected("grid z = 65536", config);
    flag_kernel<<<dim3(2147483648u), 1>>>(d_flag);
    expect_rejected("grid x = 2^31", config);
    flag_kernel<<<0, 32>>>(d_flag);
    expect_rejected("grid of 0 blocks", config);
    flag_kernel<<<1, 0>>>(d_flag);
    expect_rejected("block of 0 threads", config);
    flag_kernel<<<dim3(1, 0, 1), 32>>>(d_flag);
    expect_rejected("grid y = 0", config);
    flag_kernel<<<1, dim3(4, 4, 0)>>>(d_flag);
    expect_rejected("block z = 0", config);

    // Shared memory: 48 KiB is the default limit; 1024 x 1 x 64 threads is still valid.
    flag_kernel<<<1, dim3(16, 1, 64)>>>(d_flag);
    CUDA_CHECK(cudaGetLastError());
    if (read_flag() != 1) {
        printf("a valid 16 x 1 x 64 launch did not run\n");
        failures++;
    }
    CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
    const int kib = 1024;
    smem_kernel<<<1, 256, 48 * kib>>>(d_flag, 48 * kib / 4);
    CUDA_CHECK(cudaGetLastError());
    if (read_flag() != 1) {
        printf("48 KiB of dynamic shared memory did not work\n");
        failures++;
    }
    CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
    smem_kernel<<<1, 256, 48 * kib + 4>>>(d_flag, 48 * kib / 4 + 1);
    expect_rejected("48 KiB + 4 bytes without the attribute", cudaErrorInvalidValue);

    CUDA_CHECK(
        cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * kib));
    smem_kernel<<<1, 256, 100 * kib>>>(d_flag, 100 * kib / 4);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("%-44s -> %s\n", "100 KiB with the attribute set to 100 KiB",
           read_flag() ? "ran" : "did not run");
    if (read_flag() != 1) failures++;
    CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
    smem_kernel<<<1, 256, 100 * kib + 4>>>(d_flag, 100 * kib / 4 + 1);
    expect_rejected("100 KiB + 4 bytes with the attribute", cudaErrorInvalidValue);

    cudaError_t too_big =
        cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * kib);
    printf("%-44s -> %s\n", "attribute set to 228 KiB", cudaGetErrorName(too_big));
    if (too_big != cudaErrorInvalidValue) failures++;
    cudaGetLastError();

    CUDA_CHECK(cudaFree(d_flag));
    printf("%s: %d failures\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
