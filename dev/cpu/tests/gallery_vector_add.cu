// Gallery: the classic first CUDA program, a grid-stride vector add over pinned host memory
// with an async copy on a stream and event timing, checked against the host sum.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include "test_util.h"

__global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ c, size_t n) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        c[i] = a[i] + b[i];
}

int main() {
    const size_t n = 1 << 20;
    float *a, *b, *c, *da, *db, *dc;
    CUDA_CHECK(cudaMallocHost(&a, n * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&b, n * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&c, n * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        a[i] = sinf((float)i);
        b[i] = cosf((float)i);
    }
    CUDA_CHECK(cudaMalloc(&da, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&db, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dc, n * sizeof(float)));
    cudaStream_t stream;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaMemcpyAsync(da, a, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(db, b, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    int device, sms;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaEventRecord(start, stream));
    vector_add<<<sms * 4, 256, 0, stream>>>(da, db, dc, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaMemcpyAsync(c, dc, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += c[i] != a[i] + b[i];
    printf("vector_add of %zu floats on %d SMs: %.3f ms, %zu wrong\n", n, sms, ms, bad);
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dc));
    CUDA_CHECK(cudaFreeHost(a));
    CUDA_CHECK(cudaFreeHost(b));
    CUDA_CHECK(cudaFreeHost(c));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaStreamDestroy(stream));
    return bad == 0 ? 0 : 1;
}
