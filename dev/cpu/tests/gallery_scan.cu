// Gallery: inclusive prefix sum of a large array in three kernels: a work-efficient
// (Blelloch) scan of each 512-element block in shared memory, a scan of the block totals, and
// adding each block's offset; checked against the host's running sum.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

#define ELEMS 512  // per block; 256 threads, 2 elements each

// Inclusive scan of each ELEMS-element chunk; the chunk's total goes to sums[blockIdx.x].
__global__ void block_scan(const int* in, int* out, int* sums, int n) {
    __shared__ int temp[ELEMS];
    int tid = threadIdx.x, base = blockIdx.x * ELEMS;
    temp[2 * tid] = base + 2 * tid < n ? in[base + 2 * tid] : 0;
    temp[2 * tid + 1] = base + 2 * tid + 1 < n ? in[base + 2 * tid + 1] : 0;
    int offset = 1;
    for (int d = ELEMS >> 1; d > 0; d >>= 1) {  // up-sweep
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset *= 2;
    }
    __syncthreads();
    int total = temp[ELEMS - 1];
    __syncthreads();
    if (tid == 0) temp[ELEMS - 1] = 0;
    for (int d = 1; d < ELEMS; d *= 2) {  // down-sweep
        offset >>= 1;
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
            int t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    // temp holds the exclusive scan; add the element itself for the inclusive one
    if (base + 2 * tid < n) out[base + 2 * tid] = temp[2 * tid] + in[base + 2 * tid];
    if (base + 2 * tid + 1 < n)
        out[base + 2 * tid + 1] = temp[2 * tid + 1] + in[base + 2 * tid + 1];
    if (tid == 0) sums[blockIdx.x] = total;
}

__global__ void add_offsets(int* out, const int* scanned_sums, int n) {
    int i = (blockIdx.x + 1) * ELEMS + threadIdx.x;
    for (int k = 0; k < 2; k++, i += blockDim.x)
        if (i < n) out[i] += scanned_sums[blockIdx.x];
}

int main() {
    const int n = 200000;
    const int blocks = (n + ELEMS - 1) / ELEMS;  // 391: their totals fit one more 512-chunk
    std::vector<int> h(n), got(n);
    for (int i = 0; i < n; i++) h[i] = (i * 7919) % 13 - 6;
    int *d_in, *d_out, *d_sums, *d_sums_scanned, *d_dummy;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_sums, blocks * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_sums_scanned, blocks * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_dummy, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    block_scan<<<blocks, ELEMS / 2>>>(d_in, d_out, d_sums, n);
    block_scan<<<1, ELEMS / 2>>>(d_sums, d_sums_scanned, d_dummy, blocks);
    add_offsets<<<blocks - 1, ELEMS / 2>>>(d_out, d_sums_scanned, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long run = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        run += h[i];
        if (got[i] != run && bad++ < 5) printf("out[%d] = %d, want %lld\n", i, got[i], run);
    }
    printf("scan of %d ints: %d wrong\n", n, bad);
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_sums));
    CUDA_CHECK(cudaFree(d_sums_scanned));
    CUDA_CHECK(cudaFree(d_dummy));
    return bad ? 1 : 0;
}
