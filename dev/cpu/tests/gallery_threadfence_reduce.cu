// Gallery: single-pass sum in the style of the CUDA samples' threadFenceReduction: each block
// writes its partial sum, __threadfence() publishes it, and the last block to finish (found
// with atomicInc on a counter) adds up all partials. Also a tiled matrix multiply through
// shared memory. Both are checked against the host.
//! run: ./prog => pass
//! run: CUCC_THREADS=2 ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include "test_util.h"

__device__ unsigned int retirement_count = 0;

__global__ void sum_single_pass(const double* in, double* partial, double* result, int n) {
    __shared__ double sdata[256];
    __shared__ bool am_last;
    double s = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        s += in[i];
    sdata[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sdata[threadIdx.x] += sdata[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = sdata[0];
        __threadfence();  // make the partial visible before announcing it
        unsigned int ticket = atomicInc(&retirement_count, gridDim.x);
        am_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (am_last && threadIdx.x == 0) {
        double total = 0.0;
        for (int b = 0; b < gridDim.x; b++) total += partial[b];
        *result = total;
        retirement_count = 0;
    }
}

#define TILE 16
// C (M,N) = A (M,K) @ B (K,N), all row-major.
__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] =
            row < M && t + threadIdx.x < K ? A[row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] =
            col < N && t + threadIdx.y < K ? B[(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

int main() {
    int failures = 0;
    const int n = 1000003, blocks = 96;
    std::vector<double> h(n);
    for (int i = 0; i < n; i++) h[i] = (double)((i * 31) % 1000);  // exact sums in double
    double *d_in, *d_partial, *d_result;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&d_partial, blocks * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&d_result, sizeof(double)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(double), cudaMemcpyHostToDevice));
    double want = 0.0;
    for (double v : h) want += v;
    for (int rep = 0; rep < 3; rep++) {
        sum_single_pass<<<blocks, 256>>>(d_in, d_partial, d_result, n);
        CUDA_CHECK(cudaGetLastError());
        double got;
        CUDA_CHECK(cudaMemcpy(&got, d_result, sizeof(double), cudaMemcpyDeviceToHost));
        printf("single-pass sum, run %d: %.1f (want %.1f)\n", rep, got, want);
        failures += got != want;
    }

    const int M = 70, N = 45, K = 100;
    std::vector<float> A(M * K), B(K * N), C(M * N);
    for (int i = 0; i < M * K; i++) A[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)(i % 5) * 0.5f;
    float *dA, *dB, *dC;
    CUDA_CHECK(cudaMalloc(&dA, A.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dB, B.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dC, C.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice));
    matmul_tiled<<<dim3((N + TILE - 1) / TILE, (M + TILE - 1) / TILE), dim3(TILE, TILE)>>>(
        dA, dB, dC, M, N, K);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;  // small integers and halves: exact in any order
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            bad += C[i * N + j] != s;
        }
    printf("tiled matmul %d x %d x %d: %d wrong\n", M, N, K, bad);
    failures += bad != 0;
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_partial));
    CUDA_CHECK(cudaFree(d_result));
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
    return failures ? 1 : 0;
}
