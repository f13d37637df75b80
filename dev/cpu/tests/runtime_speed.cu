// runtime_speed.cu: how fast the CPU runtime runs kernels, checked against fixed budgets.
//   - layernorm forward, 4096 rows x 768, one warp per row, two shuffle reductions per row
//     (5 __shfl_xor_sync each), on one OS thread (CUCC_THREADS=1); its output is compared with
//     a host layernorm, and its CPU time with that host computation's in the same run, so the
//     machine's speed cancels: at most LAYERNORM_RATIO times the host's. The bound keeps the
//     margin of the former fixed budget (100 ms where the runtime took 47, 2.13x) over the
//     runtime as it was then, whose ratio measures 2.6 to 3.0 on this machine: 2.8 x 2.13 = 6.
//     (The divergence-faithful warp calls measured 3.8 to 4.5 at first; with the shuffles
//     inlined into kernels, fiber stacks staggered across cache sets and the warp release
//     trimmed (block.cpp), 2.5 to 3.2, where the runtime before those warp calls measured 2.3
//     to 3.6 in the same interleaved runs; the ratio is printed on every run.) Both reductions
//     are butterfly loops, which cucc makes one warp exchange each (cucc_warp_butterfly.cu):
//     0.94 to 0.97 since then, against 1.97 to 2.05 with five shuffles each.
//   - a barrier-heavy kernel (one block of 256 threads, 2000 __syncthreads) and a warp-shuffle
//     loop (not a butterfly: every shuffle is a warp call), reported as nanoseconds per thread
//     per barrier / per lane per shuffle.
// CPU time of the calling thread is used rather than wall time, which other processes on a
// shared machine inflate.
//! cpu-only
//! exclusive
//! run: CUCC_THREADS=1 ./prog => pass /layernorm .* ms/
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

constexpr double LAYERNORM_RATIO = 6.0;

static double cpu_ms() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// out, inp are (N, C) row-major; one warp per row; lane l handles columns l, l+32, ...
__global__ void layernorm_kernel(float* out, const float* inp, const float* weight,
                                 const float* bias, int N, int C) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float mean = sum / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) var += (x[i] - mean) * (x[i] - mean);
    for (int o = 16; o > 0; o /= 2) var += __shfl_xor_sync(0xffffffffu, var, o);
    float rstd = 1.0f / sqrtf(var / C + 1e-5f);
    for (int i = lane; i < C; i += 32)
        out[(size_t)row * C + i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

// Each of `rounds` steps: write own slot, barrier, read the neighbour's, barrier.
__global__ void barrier_kernel(int* out, int rounds) {
    __shared__ int slots[1024];
    int t = threadIdx.x, v = t;
    for (int r = 0; r < rounds; r++) {
        slots[t] = v;
        __syncthreads();
        v = slots[(t + 1) % blockDim.x] + 1;
        __syncthreads();
    }
    out[t] = v;
}

__global__ void shuffle_kernel(int* out, int rounds) {
    int v = threadIdx.x;
    for (int r = 0; r < rounds; r++) v = __shfl_xor_sync(0xffffffffu, v, 1) + 1;
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main() {
    const int N = 4096, C = 768;
    std::vector<float> x((size_t)N * C), w(C), b(C), y((size_t)N * C);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = sinf(0.37f * (float)(i % 100003)) + 0.1f * (float)(i % 7);
    for (int i = 0; i < C; i++) {
        w[i] = 1.0f + 0.01f * i;
        b[i] = 0.001f * i;
    }
    float *dx, *dw, *db, *dy;
    CUDA_CHECK(cudaMalloc(&dx, x.size() * 4));
    CUDA_CHECK(cudaMalloc(&dy, x.size() * 4));
    CUDA_CHECK(cudaMalloc(&dw, C * 4));
    CUDA_CHECK(cudaMalloc(&db, C * 4));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw, w.data(), C * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), C * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dy, 0xff, x.size() * 4));  // NaN until written

    // Best of 3, so a one-off stall on a shared machine does not decide the result.
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cpu_ms();
        layernorm_kernel<<<N * 32 / 256, 256>>>(dy, dx, dw, db, N, C);
        CUDA_CHECK(cudaDeviceSynchronize());
        best = fmin(best, cpu_ms() - t0);
    }
    CUDA_CHECK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    double max_err = 0.0;
    const double host_t0 = cpu_ms();
    for (int r = 0; r < N; r++) {
        const float* xr = &x[(size_t)r * C];
        double mean = 0, var = 0;
        for (int i = 0; i < C; i++) mean += xr[i];
        mean /= C;
        for (int i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= C;
        for (int i = 0; i < C; i++) {
            double ref = (xr[i] - mean) / sqrt(var + 1e-5) * w[i] + b[i];
            double err = fabs(ref - y[(size_t)r * C + i]);
            max_err = err > max_err || err != err ? err : max_err;
        }
    }
    const double host_ms = cpu_ms() - host_t0;
    int lane_shuffles = N * 32 * 10;
    const double ratio = best / host_ms;
    printf(
        "layernorm 4096x768: %.1f ms CPU, %.2f x the host reference's %.1f ms (bound %.1f x), "
        "%.1f ns per lane per butterfly step including the arithmetic; max abs error vs host %.2e "
        "(bound 1e-4)\n",
        best, ratio, host_ms, LAYERNORM_RATIO, best * 1e6 / lane_shuffles, max_err);

    const int threads = 256, rounds = 2000;
    int* dout;
    CUDA_CHECK(cudaMalloc(&dout, 64 * 1024 * sizeof(int)));
    double t0 = cpu_ms();
    barrier_kernel<<<1, threads>>>(dout, rounds);
    CUDA_CHECK(cudaDeviceSynchronize());
    double barrier_ms = cpu_ms() - t0;
    std::vector<int> h(threads);
    CUDA_CHECK(cudaMemcpy(h.data(), dout, threads * sizeof(int), cudaMemcpyDeviceToHost));
    bool barrier_ok = true;
    for (int t = 0; t < threads; t++) barrier_ok &= h[t] == (t + rounds) % threads + rounds;
    printf("barriers: %.1f ns per thread per __syncthreads (%d threads, %d barriers), %s\n",
           barrier_ms * 1e6 / (threads * 2.0 * rounds), threads, 2 * rounds,
           barrier_ok ? "correct" : "WRONG");

    t0 = cpu_ms();
    shuffle_kernel<<<64, 1024>>>(dout, 100);
    CUDA_CHECK(cudaDeviceSynchronize());
    double shuffle_ms = cpu_ms() - t0;
    std::vector<int> hs(64 * 1024);
    CUDA_CHECK(cudaMemcpy(hs.data(), dout, hs.size() * sizeof(int), cudaMemcpyDeviceToHost));
    bool shuffle_ok = true;
    for (int i = 0; i < 64 * 1024; i++) shuffle_ok &= hs[i] == i % 1024 + 100;  // 100 even swaps
    printf("shuffles: %.1f ns per lane per __shfl_xor_sync, %s\n",
           shuffle_ms * 1e6 / (64 * 1024 * 100.0), shuffle_ok ? "correct" : "WRONG");

    bool ok = ratio <= LAYERNORM_RATIO && max_err < 1e-4 && barrier_ok && shuffle_ok;
    printf("%s\n", ok ? "speed checks passed" : "speed checks FAILED");
    return ok ? 0 : 1;
}
