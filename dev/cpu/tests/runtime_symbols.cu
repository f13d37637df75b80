// runtime_symbols.cu: __constant__ and __device__ variables through the symbol API
// (cudaMemcpyToSymbol / FromSymbol / GetSymbolAddress) and the kernel-pointer overloads of
// cudaFuncSetAttribute / cudaFuncSetCacheConfig. The address from cudaGetSymbolAddress is an
// ordinary device pointer: cudaMemcpy and cudaMemset accept it, a kernel sees what they wrote,
// and cudaFree rejects it. Copies at an offset reach the right bytes, and a copy past the end of
// the variable fails with cudaErrorInvalidValue. Valid CUDA: the same file runs on a GPU.
#include <cstdio>
#include "test_util.h"

__constant__ float coeffs[4];
__device__ int counter;
__device__ float table[64];

__global__ void sum_table(float* out) {
    float s = 0.0f;
    for (int i = 0; i < 64; i++) s += table[i];
    *out = s;
}

__global__ void scale_by_coeffs(float* out) {
    out[threadIdx.x] = coeffs[threadIdx.x] * 2.0f;
    if (threadIdx.x == 0) counter = 7;
}

extern __shared__ float big_smem[];
__global__ void touch_big_smem(float* out) {
    big_smem[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = big_smem[blockDim.x - 1 - threadIdx.x];
}

int main() {
    float host[4] = {1, 2, 3, 4}, result[4];
    float* d;
    CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(float)));
    CUDA_CHECK(cudaMemcpyToSymbol(coeffs, host, sizeof(host)));
    scale_by_coeffs<<<1, 4>>>(d);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(result, d, sizeof(result), cudaMemcpyDeviceToHost));
    int c = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&c, counter, sizeof(int)));
    for (int i = 0; i < 4; i++) {
        if (result[i] != 2 * host[i]) {
            printf("FAIL: out[%d] = %g, want %g\n", i, result[i], 2 * host[i]);
            return 1;
        }
    }
    if (c != 7) {
        printf("FAIL: counter = %d, want 7\n", c);
        return 1;
    }
    // Offsets, and copies that would run past the end of the variable (16 bytes).
    float two[2] = {10, 20}, back2[2];
    CUDA_CHECK(cudaMemcpyToSymbol(coeffs, two, sizeof two, 2 * sizeof(float)));
    CUDA_CHECK(cudaMemcpyFromSymbol(back2, coeffs, sizeof back2, 1 * sizeof(float)));
    if (back2[0] != host[1] || back2[1] != 10) {
        printf("FAIL: copies at an offset read back %g %g, want %g 10\n", back2[0], back2[1],
               host[1]);
        return 1;
    }
    cudaError_t past_to = cudaMemcpyToSymbol(coeffs, two, sizeof two, 3 * sizeof(float));
    cudaError_t past_from = cudaMemcpyFromSymbol(back2, coeffs, 5 * sizeof(float));
    cudaError_t last = cudaGetLastError();
    if (past_to != cudaErrorInvalidValue || past_from != cudaErrorInvalidValue ||
        last != cudaErrorInvalidValue) {
        printf(
            "FAIL: copies past the end of a symbol: %s, %s (last error %s), want "
            "cudaErrorInvalidValue\n",
            cudaGetErrorName(past_to), cudaGetErrorName(past_from), cudaGetErrorName(last));
        return 1;
    }
    // The symbol's address is the variable itself.
    int* counter_ptr = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress((void**)&counter_ptr, counter));
    if (counter_ptr == nullptr) {
        printf("FAIL: cudaGetSymbolAddress gave a null pointer\n");
        return 1;
    }
    // Copies and memsets through the symbol's address, as through a cudaMalloc pointer.
    float* table_ptr = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress((void**)&table_ptr, table));
    float host_table[64], back_table[64];
    for (int i = 0; i < 64; i++) host_table[i] = (float)(i * 3 - 50);
    CUDA_CHECK(cudaMemcpy(table_ptr, host_table, sizeof(host_table), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(table_ptr + 32, 0, 32 * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(back_table, table_ptr, sizeof(back_table), cudaMemcpyDeviceToHost));
    float want_sum = 0.0f;
    for (int i = 0; i < 64; i++) {
        float want = i < 32 ? host_table[i] : 0.0f;
        want_sum += want;
        if (back_table[i] != want) {
            printf("FAIL: table[%d] read back through the symbol address = %g, want %g\n", i,
                   back_table[i], want);
            return 1;
        }
    }
    sum_table<<<1, 1>>>(d);
    CUDA_CHECK(cudaGetLastError());
    float sum = 0.0f;
    CUDA_CHECK(cudaMemcpy(&sum, d, sizeof(float), cudaMemcpyDeviceToHost));
    if (sum != want_sum) {
        printf("FAIL: the kernel sums the table to %g, want %g\n", sum, want_sum);
        return 1;
    }
    if (cudaFree(table_ptr) != cudaErrorInvalidValue) {
        printf("FAIL: cudaFree accepted a symbol address\n");
        return 1;
    }
    cudaGetLastError();
    // 64 KiB of dynamic shared memory needs the attribute, set through the kernel pointer.
    const size_t smem = 64 * 1024;
    touch_big_smem<<<1, 64, smem>>>(d);
    if (cudaGetLastError() == cudaSuccess) {
        printf("FAIL: 64 KiB of dynamic shared memory launched without the attribute\n");
        return 1;
    }
    CUDA_CHECK(cudaFuncSetAttribute(touch_big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    CUDA_CHECK(cudaFuncSetCacheConfig(touch_big_smem, cudaFuncCachePreferShared));
    touch_big_smem<<<1, 64, smem>>>(d);
    CUDA_CHECK(cudaGetLastError());
    float back[64];
    CUDA_CHECK(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) {
        if (back[i] != (float)(63 - i)) {
            printf("FAIL: smem round trip [%d] = %g\n", i, back[i]);
            return 1;
        }
    }
    CUDA_CHECK(cudaFree(d));
    printf("symbols and kernel attributes OK\n");
    return 0;
}
