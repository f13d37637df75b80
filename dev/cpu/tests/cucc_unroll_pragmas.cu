// cucc_unroll_pragmas.cu: CUDA's unroll pragmas reach g++ as GCC's (UNROLL_PRAGMA in
// dev/cpu/cucc) and change no result. The kernel marks loops of constant and of run-time trip
// counts with every form: bare, a literal count, a parenthesized one, _Pragma("unroll") from a
// macro, a count past GCC's largest; a template-dependent count and a pragma before a statement
// that is no loop stay CUDA's (g++ ignores them; GCC's form would crash or fail there). The first
// case compares the sums with the host's; the second reads the pragmas g++ was given.
//! cpu-only
//! cucc: --keep-rewritten
//! run: ./prog => pass /unrolled sums: right/
//! run: grep -h 'pragma.*unroll' ./prog.cucc_unroll_pragmas.cu.ii | sed 's/^ *//' | sort | uniq -c | tr -s ' \n' ' ' => pass /^ *2 #pragma GCC unroll 1 3 #pragma GCC unroll 16 1 #pragma GCC unroll 2 1 #pragma GCC unroll 65534 1 #pragma unroll 1 #pragma unroll ROUNDS $/
#include <cstdio>
#include <vector>
#include "test_util.h"

#define UNROLL_ALL _Pragma("unroll")

constexpr int WIDTH = 4;  // accumulators per thread: a small array the unrolling keeps in registers

// out[t] = sum over r of (r + 1) * (sum over i < n of in[t][i][r]), doubled, plus 0 + 1 + ... +
// ROUNDS-1; each loop marked with another form of the pragma.
template <int ROUNDS>
__global__ void sums_kernel(float* out, const float* in, int n) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const float* row = in + (size_t)t * n * WIDTH;
    float acc[WIDTH];
#pragma unroll
    for (int r = 0; r < WIDTH; r++) acc[r] = 0.0f;
#pragma unroll 1
    for (int i = 0; i < n / 2; i++)
#pragma unroll(2)
        for (int r = 0; r < WIDTH; r++) acc[r] += row[i * WIDTH + r];
#pragma unroll
    for (int i = n / 2; i < n; i++)  // a run-time trip count: unrolled 16 times by g++
#pragma unroll 1
        for (int r = 0; r < WIDTH; r++) acc[r] += row[i * WIDTH + r];
    float total = 0.0f;
    UNROLL_ALL
    for (int r = 0; r < WIDTH; r++) total += acc[r] * (r + 1);
#pragma unroll
    total *= 2.0f;
#pragma unroll ROUNDS
    for (int r = 0; r < ROUNDS; r++) total += r;
    int k = 0;
#pragma unroll 100000
    while (k < 3) k++;
    out[t] = total + (k - 3);
}

int main() {
    const int threads = 64, n = 37;
    std::vector<float> in((size_t)threads * n * WIDTH), out(threads), expected(threads);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)((i * 7) % 13) - 6.0f;
    for (int t = 0; t < threads; t++) {
        float acc[WIDTH] = {};
        for (int i = 0; i < n; i++)
            for (int r = 0; r < WIDTH; r++) acc[r] += in[((size_t)t * n + i) * WIDTH + r];
        float total = 0.0f;
        for (int r = 0; r < WIDTH; r++) total += acc[r] * (r + 1);
        expected[t] = total * 2.0f + (0 + 1 + 2 + 3 + 4);
    }
    float *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, in.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
    sums_kernel<5><<<2, threads / 2>>>(d_out, d_in, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int t = 0; t < threads; t++) wrong += out[t] != expected[t];
    printf("unrolled sums: %s (%d of %d threads differ from the host's)\n",
           wrong ? "WRONG" : "right", wrong, threads);
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    return wrong ? 1 : 0;
}
