// Gallery: row softmax with cooperative groups, one 32-thread tile per row, max and sum via
// cg::reduce, computed with __expf; compared with a double-precision host softmax.
//! run: ./prog => pass
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "test_util.h"

namespace cg = cooperative_groups;

__global__ void softmax_kernel(float* out, const float* inp, int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float maxval = -INFINITY;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) maxval = fmaxf(maxval, x[i]);
    maxval = cg::reduce(warp, maxval, cg::greater<float>());
    float sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) sum += __expf(x[i] - maxval);
    sum = cg::reduce(warp, sum, cg::plus<float>());
    for (int i = warp.thread_rank(); i < C; i += warp.size())
        out[(size_t)row * C + i] = __expf(x[i] - maxval) / sum;
}

int main() {
    const int N = 333, C = 1000;
    std::vector<float> inp((size_t)N * C), out(inp.size());
    srand(1);
    for (float& v : inp) v = (float)rand() / RAND_MAX * 20.0f - 10.0f;
    float *d_inp, *d_out;
    CUDA_CHECK(cudaMalloc(&d_inp, inp.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_inp, inp.data(), inp.size() * sizeof(float), cudaMemcpyHostToDevice));
    const int block = 128;
    softmax_kernel<<<(N * 32 + block - 1) / block, block>>>(d_out, d_inp, N, C);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double max_err = 0.0;
    for (int r = 0; r < N; r++) {
        double m = -1e300, s = 0.0;
        for (int c = 0; c < C; c++) m = std::fmax(m, inp[(size_t)r * C + c]);
        for (int c = 0; c < C; c++) s += std::exp(inp[(size_t)r * C + c] - m);
        for (int c = 0; c < C; c++)
            max_err = std::fmax(max_err, std::fabs(out[(size_t)r * C + c] -
                                                   std::exp(inp[(size_t)r * C + c] - m) / s));
    }
    printf("softmax %d x %d: max abs error %.3e (bound 1e-6)\n", N, C, max_err);
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_out));
    return max_err < 1e-6 ? 0 : 1;
}
