// CUCC_SCHEDULE=random exposes a missing __syncthreads: each thread stores a value to shared
// memory and then reads the value its left neighbour stored. Without the barrier between the
// store and the read, the result depends on the order threads run in. The default schedule runs
// threads in order and happens to give the right answer; the random schedule runs them in a
// shuffled order and the test itself reports the wrong result. The kernel with the barrier
// must be right under every seed.
//! cpu-only
//! run: CUCC_SCHEDULE=random CUCC_SEED=1 ./prog missing => fail /wrong result: missing barrier exposed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=2 ./prog missing => fail /wrong result: missing barrier exposed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=1 ./prog correct => pass
//! run: CUCC_SCHEDULE=random CUCC_SEED=7 ./prog correct => pass
//! run: CUCC_SCHEDULE=random CUCC_SEED=12345 ./prog correct => pass
//! run: CUCC_SCHEDULE=random CUCC_SEED=99 CUCC_THREADS=2 ./prog correct => pass
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "test_util.h"

// out[i] = in[i] + in[i - 1] within each block of 256 (the first thread adds 0).
template <bool WithBarrier>
__global__ void neighbour_sum(const int* in, int* out) {
    __shared__ int vals[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    vals[t] = in[i];
    if (WithBarrier) __syncthreads();
    out[i] = vals[t] + (t > 0 ? vals[t - 1] : 0);
}

int main(int argc, char** argv) {
    bool with_barrier = argc > 1 && strcmp(argv[1], "correct") == 0;
    const int blocks = 8, n = blocks * 256;
    std::vector<int> h(n), got(n);
    for (int i = 0; i < n; i++) h[i] = i * 3 + 1;
    int *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    // The block's shared memory starts with stale values from earlier blocks of the other
    // kernel: run each block twice over different data so a stale read cannot look right.
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int i = 0; i < n; i++) h[i] = 7 * i - 5;
            CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        }
        if (with_barrier) neighbour_sum<true><<<blocks, 256>>>(d_in, d_out);
        else neighbour_sum<false><<<blocks, 256>>>(d_in, d_out);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    }
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += got[i] != h[i] + (i % 256 ? h[i - 1] : 0);
    if (wrong) {
        printf("wrong result: missing barrier exposed (%d of %d outputs differ)\n", wrong, n);
        return 1;
    }
    printf("OK: all %d outputs right\n", n);
    return 0;
}
