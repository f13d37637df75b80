// libcu++ from the toolkit's include/cccl (which nvcc searches, and so does cucc): cuda::atomic_ref
// with device scope counting and taking the maximum over a grid of 64 blocks on several OS
// threads, and cuda::std::numeric_limits in device code.
//! run: CUCC_THREADS=2 ./prog => pass /all libcu\+\+ checks passed/
#include <cuda/atomic>
#include <cuda/std/limits>
#include <string>
#include "test_util.h"

__global__ void count_kernel(int* count, int* max, int* lowest) {
    cuda::atomic_ref<int, cuda::thread_scope_device> c(*count), m(*max);
    c.fetch_add(1, cuda::std::memory_order_relaxed);
    m.fetch_max((int)(blockIdx.x * blockDim.x + threadIdx.x), cuda::std::memory_order_relaxed);
    if (blockIdx.x == 0 && threadIdx.x == 0) *lowest = cuda::std::numeric_limits<int>::lowest();
}

int main() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 3 * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, 3 * sizeof(int)));
    count_kernel<<<64, 128>>>(d, d + 1, d + 2);
    CUDA_CHECK(cudaGetLastError());
    int h[3];
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 64 * 128, "cuda::atomic_ref::fetch_add from every thread", std::to_string(h[0]));
    expect(h[1] == 64 * 128 - 1, "cuda::atomic_ref::fetch_max", std::to_string(h[1]));
    expect(h[2] == -2147483647 - 1, "cuda::std::numeric_limits<int>::lowest()",
           std::to_string(h[2]));
    CUDA_CHECK(cudaFree(d));
    return test_report("libcu++");
}
