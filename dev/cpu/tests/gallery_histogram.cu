// Gallery: a 256-bin byte histogram with per-block privatized bins in shared memory
// (shared-memory atomics), merged into the global histogram with global atomics.
//! run: ./prog => pass
//! run: CUCC_THREADS=2 ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

#define NUM_BINS 256

__global__ void histogram_kernel(const unsigned char* data, size_t n, unsigned int* bins) {
    __shared__ unsigned int local[NUM_BINS];
    for (int i = threadIdx.x; i < NUM_BINS; i += blockDim.x) local[i] = 0;
    __syncthreads();
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < NUM_BINS; i += blockDim.x)
        if (local[i]) atomicAdd(&bins[i], local[i]);
}

int main() {
    const size_t n = 3000000;
    std::vector<unsigned char> h(n);
    unsigned s = 12345;
    for (auto& x : h) {
        s = s * 1103515245u + 12345u;
        x = (unsigned char)((s >> 16) % 200 + (s >> 28));  // uneven distribution
    }
    unsigned char* d_data;
    unsigned int* d_bins;
    CUDA_CHECK(cudaMalloc(&d_data, n));
    CUDA_CHECK(cudaMalloc(&d_bins, NUM_BINS * sizeof(unsigned int)));
    CUDA_CHECK(cudaMemcpy(d_data, h.data(), n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_bins, 0, NUM_BINS * sizeof(unsigned int)));
    histogram_kernel<<<64, 256>>>(d_data, n, d_bins);
    CUDA_CHECK(cudaGetLastError());
    unsigned int bins[NUM_BINS];
    CUDA_CHECK(cudaMemcpy(bins, d_bins, sizeof(bins), cudaMemcpyDeviceToHost));
    unsigned int want[NUM_BINS] = {0};
    for (unsigned char x : h) want[x]++;
    int bad = 0;
    for (int i = 0; i < NUM_BINS; i++)
        if (bins[i] != want[i]) {
            printf("bin %d: %u, want %u\n", i, bins[i], want[i]);
            bad++;
        }
    printf("histogram of %zu bytes: %d wrong bins\n", n, bad);
    CUDA_CHECK(cudaFree(d_data));
    CUDA_CHECK(cudaFree(d_bins));
    return bad ? 1 : 0;
}
