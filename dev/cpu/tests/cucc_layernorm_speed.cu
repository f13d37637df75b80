// Speed of warp-synchronous code on the CPU runtime: a layernorm forward over 4096 rows of 768,
// one warp per row, two shuffle reductions per row (mean, then variance), with CUCC_THREADS=1
// (one OS thread). No time is fixed: the machines this runs on differ several times over in
// speed. The kernel's time is bounded by kRatio times that of the host layernorm (in double) that
// checks its result, timed in the same run; both are CPU time of this thread, which other
// processes do not inflate, and the kernel's is the best of 5 launches. Measured here, on 2 cores
// shared with builds: 2.7 to 3.3, while the kernel's wall time, 180 to 210 ms, was twice the
// former fixed budget of 100 ms. kRatio, 7.5, is about 2.3 times the highest, the margin
// runtime_speed.cu's bound keeps over its layernorm's; the ratio is printed on every run.
//! exclusive
//! run: CUCC_THREADS=1 ./prog => pass
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

constexpr double kRatio = 7.5;

static double cpu_ms() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// inp, out are (N, C) row-major; weight, bias are (C). One warp per row; each lane handles
// the columns lane, lane + 32, ...
__global__ void layernorm_forward_kernel(float* out, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += x[c];
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - mean;
        sq += d * d;
    }
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    float* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - mean) * rstd * weight[c] + bias[c];
}

int main() {
    const int N = 4096, C = 768, block = 256;
    std::vector<float> inp((size_t)N * C), weight(C), bias(C), out((size_t)N * C);
    srand(5);
    for (float& v : inp) v = (float)rand() / RAND_MAX * 4.0f - 2.0f;
    for (int c = 0; c < C; c++) {
        weight[c] = 0.5f + (float)c / C;
        bias[c] = (float)(c % 7) * 0.1f;
    }
    float *d_inp, *d_w, *d_b, *d_out;
    CUDA_CHECK(cudaMalloc(&d_inp, inp.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_w, C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_b, C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_inp, inp.data(), inp.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_w, weight.data(), C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_b, bias.data(), C * sizeof(float), cudaMemcpyHostToDevice));

    const int grid = (N * 32 + block - 1) / block;
    layernorm_forward_kernel<<<grid, block>>>(d_out, d_inp, d_w, d_b, N, C);  // warm-up
    CUDA_CHECK(cudaDeviceSynchronize());
    const int launches = 5;
    double best_ms = 1e30;
    for (int rep = 0; rep < launches; rep++) {
        const double t0 = cpu_ms();
        layernorm_forward_kernel<<<grid, block>>>(d_out, d_inp, d_w, d_b, N, C);
        CUDA_CHECK(cudaDeviceSynchronize());
        best_ms = std::fmin(best_ms, cpu_ms() - t0);
    }
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));

    double max_err = 0.0;
    const double host_t0 = cpu_ms();
    for (int r = 0; r < N; r++) {
        const float* x = &inp[(size_t)r * C];
        double mean = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) mean += x[c];
        mean /= C;
        for (int c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
        double rstd = 1.0 / std::sqrt(var / C + 1e-5);
        for (int c = 0; c < C; c++) {
            double want = (x[c] - mean) * rstd * weight[c] + bias[c];
            max_err = std::fmax(max_err, std::fabs(out[(size_t)r * C + c] - want));
        }
    }
    const double host_ms = cpu_ms() - host_t0, ratio = best_ms / host_ms, bound_err = 1e-4;
    printf(
        "layernorm %d x %d, warp per row: best of %d launches %.1f ms CPU, %.2f x the host "
        "reference's %.1f ms (bound %.1f x), max abs error %.2e (bound %.0e)\n",
        N, C, launches, best_ms, ratio, host_ms, kRatio, max_err, bound_err);
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_w));
    CUDA_CHECK(cudaFree(d_b));
    return (ratio <= kRatio && max_err < bound_err) ? 0 : 1;
}
