// Dynamic shared memory: `extern __shared__` arrays of several types inside kernels and at
// namespace scope, two declarations viewing the same bytes, sizes from 4 bytes to 48 KiB, and a
// device function reading the array. Each kernel reverses a segment of the input through shared
// memory; the host reverses the same segment.
//! run: ./prog => pass
//! run: CUCC_THREADS=2 ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

extern __shared__ float file_scope_smem[];

// Each block reverses its own segment of `per_block` floats (blockDim.x threads stride over it).
__global__ void reverse_kernel(const float* in, float* out, int per_block) {
    extern __shared__ __align__(16) float buf[];
    const float* src = in + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) buf[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x)
        out[(size_t)blockIdx.x * per_block + i] = buf[per_block - 1 - i];
}

// Same through the namespace-scope declaration, read back through a device function.
__device__ float smem_at(int i) { return file_scope_smem[i]; }
__global__ void reverse_file_scope(const float* in, float* out, int per_block) {
    const float* src = in + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) file_scope_smem[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x)
        out[(size_t)blockIdx.x * per_block + i] = smem_at(per_block - 1 - i);
}

// Two views of the same bytes: ints written as raw bytes, read back as ints.
__global__ void byte_view_kernel(const int* in, int* out, int n) {
    extern __shared__ unsigned char bytes[];
    extern __shared__ int words[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned v = (unsigned)in[i];
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (unsigned char)(v >> (8 * k));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = words[n - 1 - i];
}

int main() {
    int failures = 0;
    const int blocks = 5, max_per_block = 12 * 1024;  // 48 KiB of floats
    std::vector<float> h(blocks * max_per_block), got(h.size());
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(i % 9973) - 17.0f;
    float *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, h.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, h.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (int per_block : {1, 7, 256, 1000, max_per_block})
        for (int variant = 0; variant < 2; variant++) {
            size_t smem = per_block * sizeof(float);
            if (variant == 0) reverse_kernel<<<blocks, 128, smem>>>(d_in, d_out, per_block);
            else reverse_file_scope<<<blocks, 96, smem>>>(d_in, d_out, per_block);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaMemcpy(got.data(), d_out, blocks * per_block * sizeof(float),
                                  cudaMemcpyDeviceToHost));
            for (int b = 0; b < blocks; b++)
                for (int i = 0; i < per_block; i++) {
                    float want = h[(size_t)b * per_block + per_block - 1 - i];
                    if (got[(size_t)b * per_block + i] != want) {
                        if (failures < 10)
                            printf("%s, %d per block: block %d [%d] = %g, want %g\n",
                                   variant ? "namespace-scope array" : "kernel array", per_block, b,
                                   i, got[(size_t)b * per_block + i], want);
                        failures++;
                    }
                }
        }

    const int n = 300;
    std::vector<int> hi(n), go(n);
    for (int i = 0; i < n; i++) hi[i] = i * 2654435761u;
    int *d_i, *d_o;
    CUDA_CHECK(cudaMalloc(&d_i, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_o, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_i, hi.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    byte_view_kernel<<<1, 64, n * sizeof(int)>>>(d_i, d_o, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(go.data(), d_o, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (go[i] != hi[n - 1 - i]) {
            printf("byte view [%d] = %d, want %d\n", i, go[i], hi[n - 1 - i]);
            failures++;
        }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_i));
    CUDA_CHECK(cudaFree(d_o));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
