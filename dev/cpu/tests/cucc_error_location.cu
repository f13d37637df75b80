// Compiler errors point at the original file and line, even after cucc has rewritten a launch
// spread over lines and an extern __shared__ declaration above: the error is on line 22.
// clang-format off
//! cpu-only
//! compile: fail /cucc_error_location\.cu:22:\d+: error: .*not_declared_anywhere/
#include <cstdio>

__global__ void k(float* x, int n) {
    extern __shared__ __align__(16)
        float buf[];
    buf[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < n) x[threadIdx.x] = buf[n - 1 - threadIdx.x];
}

int main() {
    float* d = nullptr;
    k<<<1,
        32,
        32 * sizeof(float)>>>(d,
                              32);
    not_declared_anywhere = 1;
    return 0;
}
