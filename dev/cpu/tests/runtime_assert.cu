// assert() in device code: a failed assertion stops the grid, the next synchronization returns
// cudaErrorAssert and later calls keep returning it (a sticky error), and the message names the
// block and thread; assertions that hold let every thread run on. assert() in host code aborts
// the process with the usual message (run with the argument "host"). The message regex accepts
// CUDA's "block: [1,0,0], thread: [5,0,0]" and cucc's "block (1,0,0), thread (5,0,0)".
//! run: ./prog => pass /block\W+1,0,0\W+thread\W+5,0,0.*Assertion `v\[i\] >= 0. failed/
//! run: ./prog host => fail /Assertion `argc == 1' failed/
#include <assert.h>
#include <cstdio>
#include <cstring>
#include "test_util.h"

__global__ void check_nonnegative(const int* v, int n, int* done) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(v[i] >= 0);
    atomicAdd(done, 1);
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "host") == 0) {
        assert(argc == 1);
        return 0;
    }
    const int n = 64;
    int h[n];
    for (int i = 0; i < n; i++) h[i] = i;
    int *d, *done;
    CUDA_CHECK(cudaMalloc(&d, sizeof h));
    CUDA_CHECK(cudaMalloc(&done, sizeof(int)));
    CUDA_CHECK(cudaMemset(done, 0, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    check_nonnegative<<<2, 32>>>(d, n, done);
    CUDA_CHECK(cudaDeviceSynchronize());
    int passed = 0;
    CUDA_CHECK(cudaMemcpy(&passed, done, sizeof passed, cudaMemcpyDeviceToHost));
    expect(passed == n, "every thread passes an assertion that holds",
           std::to_string(passed) + " of " + std::to_string(n));

    h[37] = -1;  // block 1, thread 5
    CUDA_CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    check_nonnegative<<<2, 32>>>(d, n, done);
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    cudaError_t later = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    expect(launch == cudaSuccess, "the launch itself succeeds", cudaGetErrorName(launch));
    expect(sync == cudaErrorAssert, "synchronize returns cudaErrorAssert", cudaGetErrorName(sync));
    expect(later == cudaErrorAssert, "the error is sticky", cudaGetErrorName(later));
    return test_report("device assert");
}
