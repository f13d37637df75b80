// Block and warp reductions: sums of integers over a tree in shared memory, over warp shuffles,
// and over __syncthreads_count/and/or, for several block shapes, each compared with the host's
// sum. Integer values make every sum exact, so the comparison is exact.
//! run: ./prog => pass
//! run: CUCC_THREADS=2 ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

// One block per row: each thread sums a strided part of the row, then the block combines the
// partial sums with a shared-memory tree (blockDim.x threads, a power of two).
__global__ void row_sum_tree(const int* in, long long* out, int cols) {
    extern __shared__ long long partial[];
    const int* row = in + (size_t)blockIdx.x * cols;
    long long s = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();  // the next level reads what this one wrote
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

__device__ long long warp_sum(long long v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // complete in lane 0
}

// One block per row, any multiple of 32 threads: shuffle within warps, then warp 0 reduces the
// per-warp sums from shared memory.
__global__ void row_sum_warps(const int* in, long long* out, int cols) {
    __shared__ long long warp_sums[32];
    const int* row = in + (size_t)blockIdx.x * cols;
    long long s = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    s = warp_sum(s);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < blockDim.x / 32 ? warp_sums[lane] : 0;
        s = warp_sum(s);
        if (lane == 0) out[blockIdx.x] = s;
    }
}

// A 2-D block (16 x 8): the barrier-predicate reductions look at the first 128 entries of a
// row: how many are positive, whether all are, whether any is above 100.
__global__ void row_predicates(const int* in, int* counts, int* all_pos, int* any_pos, int cols) {
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    int v = in[(size_t)blockIdx.x * cols + t];
    int n = __syncthreads_count(v > 0);
    int a = __syncthreads_and(v > 0);
    int o = __syncthreads_or(v > 100);
    if (t == 0) {
        counts[blockIdx.x] = n;
        all_pos[blockIdx.x] = a;
        any_pos[blockIdx.x] = o;
    }
}

int main() {
    const int rows = 37, cols = 1000;
    std::vector<int> h(rows * cols);
    srand(7);
    for (int& x : h) x = rand() % 2001 - 1000;
    for (int c = 0; c < cols; c++) h[3 * cols + c] = 1 + c % 50;  // a row that is all positive
    std::vector<long long> want(rows);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) want[r] += h[r * cols + c];

    int* d_in;
    long long* d_out;
    int *d_counts, *d_all, *d_any;
    CUDA_CHECK(cudaMalloc(&d_in, h.size() * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, rows * sizeof(long long)));
    CUDA_CHECK(cudaMalloc(&d_counts, rows * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_all, rows * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_any, rows * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));

    int failures = 0;
    std::vector<long long> got(rows);
    for (int threads : {1, 32, 64, 128, 256, 1024}) {
        CUDA_CHECK(cudaMemset(d_out, 0xff, rows * sizeof(long long)));
        row_sum_tree<<<rows, threads, threads * sizeof(long long)>>>(d_in, d_out, cols);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(got.data(), d_out, rows * sizeof(long long), cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows; r++)
            if (got[r] != want[r]) {
                printf("tree reduction, %d threads, row %d: got %lld, want %lld\n", threads, r,
                       got[r], want[r]);
                failures++;
            }
    }
    for (int threads : {32, 96, 256, 1024}) {
        CUDA_CHECK(cudaMemset(d_out, 0xff, rows * sizeof(long long)));
        row_sum_warps<<<rows, threads>>>(d_in, d_out, cols);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(got.data(), d_out, rows * sizeof(long long), cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows; r++)
            if (got[r] != want[r]) {
                printf("warp reduction, %d threads, row %d: got %lld, want %lld\n", threads, r,
                       got[r], want[r]);
                failures++;
            }
    }

    row_predicates<<<rows, dim3(16, 8)>>>(d_in, d_counts, d_all, d_any, cols);
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> counts(rows), all_pos(rows), any_pos(rows);
    CUDA_CHECK(cudaMemcpy(counts.data(), d_counts, rows * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(all_pos.data(), d_all, rows * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(any_pos.data(), d_any, rows * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; r++) {
        int n = 0, big = 0;
        for (int c = 0; c < 128; c++) {
            n += h[r * cols + c] > 0;
            big |= h[r * cols + c] > 100;
        }
        if (counts[r] != n || all_pos[r] != (n == 128) || any_pos[r] != big) {
            printf("row %d: count %d and %d or %d, want %d %d %d\n", r, counts[r], all_pos[r],
                   any_pos[r], n, n == 128, big);
            failures++;
        }
    }
    if (all_pos[3] != 1) {
        printf("row 3 is all positive but __syncthreads_and gave 0\n");
        failures++;
    }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_counts));
    CUDA_CHECK(cudaFree(d_all));
    CUDA_CHECK(cudaFree(d_any));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
