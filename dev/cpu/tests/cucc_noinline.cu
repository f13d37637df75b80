// __noinline__ on a device function, with the C++ standard headers included after
// cuda_runtime.h: libstdc++ writes __attribute__((__noinline__)), so the keyword must not be a
// plain macro for __attribute__((noinline)). The headers are the test; the kernel's result is
// checked against the host.
//! run: ./prog => pass
#include <cuda_runtime.h>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <thread>
#include <cstdio>

__device__ __noinline__ int collatz_steps(int n) {
    int steps = 0;
    while (n != 1) {
        n = n % 2 ? 3 * n + 1 : n / 2;
        steps++;
    }
    return steps;
}

__global__ void collatz_kernel(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = collatz_steps(i + 1);
}

int main() {
    const int n = 100;
    int* d_out;
    int out[n];
    if (cudaMalloc(&d_out, sizeof(out)) != cudaSuccess) return 1;
    collatz_kernel<<<2, 64>>>(d_out, n);
    if (cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    std::map<int, int> wrong;
    for (int i = 0; i < n; i++) {
        int m = i + 1, steps = 0;
        while (m != 1) {
            m = m % 2 ? 3 * m + 1 : m / 2;
            steps++;
        }
        if (out[i] != steps) wrong[i + 1] = out[i];
    }
    printf("collatz steps of 1..%d: %zu wrong (27 takes %d steps, want 111)\n", n, wrong.size(),
           out[26]);
    return wrong.empty() ? 0 : 1;
}
