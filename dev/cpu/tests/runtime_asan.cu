// runtime_asan.cu: the CPU runtime under AddressSanitizer. Fibers switching stacks, blocks
// abandoned by a trap, streams and pooled warp records must not produce reports or leaks, and
// a kernel writing one element past its cudaMalloc allocation must be caught.
//! cpu-only
//! cucc: --asan
//! run: ./prog clean => pass /asan clean run: right/
//! run: CUCC_THREADS=3 CUCC_SCHEDULE=random ./prog clean => pass /asan clean run: right/
//! run: ./prog overflow => fail /ERROR: AddressSanitizer: heap-buffer-overflow/
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "test_util.h"

// Block sums through a barrier and a warp shuffle; one element per thread.
__global__ void sum_kernel(int* out, const int* in, int n) {
    __shared__ int warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}

__global__ void trap_kernel() {
    if (threadIdx.x == 40) __trap();
    __syncthreads();
}

// Writes in[0..n], one element too many.
__global__ void overflow_kernel(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) p[i] = 1.0f;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "overflow")) {
        float* d;
        CUDA_CHECK(cudaMalloc(&d, 1000 * sizeof(float)));
        overflow_kernel<<<4, 256>>>(d, 1000);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("the overflow went unnoticed\n");
        return 0;
    }
    const int n = 64 * 256;
    std::vector<int> h(n);
    long long want = 0;
    for (int i = 0; i < n; i++) want += h[i] = i % 1000;
    int *din, *dout;
    CUDA_CHECK(cudaMalloc(&din, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dout, 64 * sizeof(int)));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaMemcpyAsync(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    sum_kernel<<<64, 256, 0, s>>>(dout, din, n);
    std::vector<int> sums(64);
    CUDA_CHECK(cudaMemcpyAsync(sums.data(), dout, 64 * sizeof(int), cudaMemcpyDeviceToHost, s));
    long long got = 0;
    for (int v : sums) got += v;
    CUDA_CHECK(cudaStreamDestroy(s));
    trap_kernel<<<2, 64>>>();
    cudaError_t trapped = cudaDeviceSynchronize();
    CUDA_CHECK(cudaDeviceReset());
    bool ok = got == want && trapped == cudaErrorLaunchFailure;
    printf("sum %lld (host %lld), trap gave %s\n", got, want, cudaGetErrorName(trapped));
    printf("asan clean run: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}
