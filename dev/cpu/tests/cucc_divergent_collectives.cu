// cucc_divergent_collectives.cu: warp collectives that some lanes of the mask go past, and a
// wild store, as public kernel harnesses write them; the runtime reports each as an error
// naming the kernel, block, warp and lanes (or thread), never a crash or a wrong value.
//   skip:    a bias-gradient style block reduction (blockDim (4, 8, z)): each warp sums its rows
//            with full-mask width-4 __shfl_down_sync inside `for (r = threadIdx.x; r < z; r +=
//            4)`; for z < 4 lanes threadIdx.x >= z run the loop zero times and exit while the
//            others wait in the shuffle. The CUDA C++ Programming Guide (Warp Shuffle Functions)
//            makes that undefined ("all non-exited threads named in mask must execute the same
//            intrinsic with the same mask, or the result is undefined") and the PTX ISA (shfl.sync)
//            makes the value read from such a lane unpredictable: an error.
//   stride:  a block-stride loop with a full-mask __shfl_down_sync warp sum inside, over n
//            elements that leave some lanes of the last round without an element: the same.
//   uniform: the same two kernels with shapes where every lane makes every call (z = 4 and 8; n
//            a multiple of the block): right sums (the host computes them).
//   wild:    a kernel storing through a pointer where nothing is mapped: an illegal memory
//            access naming the kernel, block and thread, as a GPU stops the kernel with
//            cudaErrorIllegalAddress (instead of a segmentation fault).
// The existing early-return cases (lanes that exit before the others' call) stay valid: see
// cucc_divergence.cu.
//! cpu-only
//! run: ./prog skip => fail /cucc: kernel bias_rows_kernel, block \(0,0,0\), warp 0: lanes 0-1, 4-5, 8-9, 12-13, 16-17, 20-21, 24-25, 28-29 wait in a warp-synchronous call .* that lanes 2-3, 6-7, 10-11, 14-15, 18-19, 22-23, 26-27, 30-31 of the mask went past and then exited without making; CUDA leaves the result undefined/
//! run: ./prog stride => fail /cucc: kernel stride_sum_kernel, block \(0,0,0\), warp 1: lanes 0-7 wait in a warp-synchronous call .*mask 0xffffffff.* that lanes 8-31 of the mask went past/
//! run: ./prog uniform => pass /all divergent collective checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=3 ./prog uniform => pass /all divergent collective checks passed/
//! run: ./prog wild => fail /cucc: illegal memory access at address 0x[0-9a-f]+ in kernel wild_store_kernel \(block \(0,0,0\), thread \(\d+,0,0\)\): no memory is mapped there/
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "test_util.h"

// out[blockIdx.x * 8 + threadIdx.y] = the sum of in[r * 8 + threadIdx.y] over the rows r <
// blockDim.z: each warp (one z) first sums its own row with width-4 shuffles (every lane takes
// part), then the block's partial sums are summed in the loop some lanes may skip.
__global__ void bias_rows_kernel(const float* in, float* out) {
    __shared__ float partial[32][8];
    int z = threadIdx.z, c = threadIdx.y, d = threadIdx.x;
    float v = d == 0 ? in[z * 8 + c] : 0.0f;
    v += __shfl_down_sync(0xffffffff, v, 1, 4);
    v += __shfl_down_sync(0xffffffff, v, 2, 4);
    if (d == 0) partial[z][c] = v;
    __syncthreads();
    for (int k = z; k < 1; k += blockDim.z) {
        float a = 0.0f;
        for (int r = d; r < (int)blockDim.z; r += 4) {
            float w = partial[r][c];
            w += __shfl_down_sync(0xffffffff, w, 1, 4);
            w += __shfl_down_sync(0xffffffff, w, 2, 4);
            a += w;
        }
        if (d == 0) out[blockIdx.x * 8 + c] = a;
    }
}

// out[0] += the sum of in[0..n), a warp sum per round of the block-stride loop.
__global__ void stride_sum_kernel(const float* in, int n, float* out) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = in[i];
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
        if (threadIdx.x % 32 == 0) atomicAdd(out, v);
    }
}

__global__ void wild_store_kernel(float* p) { p[threadIdx.x] = 1.0f; }

// Runs bias_rows_kernel with blockDim (4, 8, z); returns the largest error against the host.
static float bias_rows(int z) {
    std::vector<float> in(z * 8);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)(i % 7) - 2.5f;
    float *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, in.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, 8 * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
    bias_rows_kernel<<<1, dim3(4, 8, z)>>>(d_in, d_out);
    float out[8];
    CUDA_CHECK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    float err = 0.0f;
    for (int c = 0; c < 8; c++) {
        float want = 0.0f;
        for (int r = 0; r < z; r++) want += in[r * 8 + c];
        err = std::max(err, std::fabs(out[c] - want));
    }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    return err;
}

// Runs stride_sum_kernel over n elements with 64 threads; returns the error against the host.
static float stride_sum(int n) {
    std::vector<float> in(n);
    double want = 0.0;
    for (int i = 0; i < n; i++) want += in[i] = (float)(i % 5) + 0.25f;
    float *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_out, 0, sizeof(float)));
    stride_sum_kernel<<<1, 64>>>(d_in, n, d_out);
    float out;
    CUDA_CHECK(cudaMemcpy(&out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    return (float)std::fabs(out - want);
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "skip") == 0) {
        printf("bias rows, z = 2: error %g\n", bias_rows(2));  // must not get here
        return 0;
    }
    if (strcmp(mode, "stride") == 0) {
        printf("stride sum, n = 104: error %g\n", stride_sum(104));  // must not get here
        return 0;
    }
    if (strcmp(mode, "wild") == 0) {
        wild_store_kernel<<<1, 32>>>((float*)nullptr + 1024);
        CUDA_CHECK(cudaDeviceSynchronize());
        return 0;
    }
    if (strcmp(mode, "uniform") != 0) {
        fprintf(stderr, "usage: %s skip|stride|uniform|wild\n", argv[0]);
        return 2;
    }
    char line[128];
    for (int z : {4, 8}) {
        float err = bias_rows(z);
        snprintf(line, sizeof line, "bias rows, blockDim (4, 8, %d): max error %g (bound 1e-5)", z,
                 err);
        expect(err <= 1e-5f, line);
    }
    for (int n : {64, 192}) {
        float err = stride_sum(n);
        snprintf(line, sizeof line, "stride sum of %d elements: error %g (bound 1e-3)", n, err);
        expect(err <= 1e-3f, line);
    }
    return test_report("divergent collective");
}
