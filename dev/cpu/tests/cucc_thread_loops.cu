// cucc_thread_loops.cu: kernels that cucc runs as a loop over each block's threads (no
// synchronizing call in their body, see ThreadLoop in cucc/runtime.h).
//   order:   a 3-D block of a loop kernel sees every threadIdx once, in thread order (x fastest):
//            the last thread to write a shared slot is the last thread; under
//            CUCC_SCHEDULE=random the threads run in a shuffled order, so that race shows as
//            another last writer for some seed, as it does on the fiber path; the elementwise
//            part is right for every seed.
//   hidden:  a kernel that reaches __syncthreads through a device function pointer, which cucc
//            cannot see: the first such call ends the program with an error naming the kernel;
//            with CUCC_THREAD_LOOPS=0 (a fiber per thread for every kernel) it is right.
//   template: the same device function given as a template argument: cucc treats a call of a
//            template parameter as unknown code and keeps the fiber path, so it is right.
// Each mode prints what it compared and exits 0 when the result is the expected one.
//! cpu-only
//! run: ./prog order => pass /thread loop order: right, last writer 63/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog order || exit 1; done => pass /thread loop order: right, last writer (?!63)/
//! run: ./prog hidden => fail /cucc: kernel hidden_sync_kernel, block \(0,0,0\), thread \(0,0,0\) calls __syncthreads, but cucc found no synchronizing call in the kernel .*CUCC_THREAD_LOOPS=0/
//! run: CUCC_THREAD_LOOPS=0 ./prog hidden => pass /hidden barrier: right/
//! run: ./prog template => pass /template barrier: right/
#include <cstdio>
#include <cstring>
#include <vector>
#include "test_util.h"

// Each thread writes its own element (x + 10 y + 100 z) and, racing, the block's one slot.
__global__ void index_kernel(int* out, int* last) {
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[blockIdx.x * blockDim.x * blockDim.y * blockDim.z + t] =
        threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
    last[blockIdx.x] = t;
}

__device__ void reverse_through_shared(int* data) {
    __shared__ int s[64];
    s[threadIdx.x] = data[threadIdx.x];
    __syncthreads();
    data[threadIdx.x] = s[63 - threadIdx.x];
}
__device__ void (*hidden_sync)(int*) = reverse_through_shared;

__global__ void hidden_sync_kernel(int* data) { hidden_sync(data); }

template <void (*F)(int*)>
__global__ void template_sync_kernel(int* data) {
    F(data);
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    int *d_out, *d_last;
    CUDA_CHECK(cudaMalloc(&d_out, 4 * 64 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_last, 4 * sizeof(int)));
    if (strcmp(mode, "order") == 0) {
        index_kernel<<<4, dim3(4, 8, 2)>>>(d_out, d_last);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<int> out(4 * 64), last(4);
        CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(last.data(), d_last, 4 * sizeof(int), cudaMemcpyDeviceToHost));
        bool right = true;
        for (int b = 0; b < 4; b++)
            for (int z = 0; z < 2; z++)
                for (int y = 0; y < 8; y++)
                    for (int x = 0; x < 4; x++)
                        right &= out[b * 64 + x + 4 * (y + 8 * z)] == x + 10 * y + 100 * z;
        printf("thread loop order: %s, last writer %d\n", right ? "right" : "WRONG", last[0]);
        return right ? 0 : 1;
    }
    const bool hidden = strcmp(mode, "hidden") == 0;
    if (hidden || strcmp(mode, "template") == 0) {
        std::vector<int> h(64);
        for (int i = 0; i < 64; i++) h[i] = i;
        CUDA_CHECK(cudaMemcpy(d_out, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
        if (hidden) hidden_sync_kernel<<<1, 64>>>(d_out);
        else template_sync_kernel<reverse_through_shared><<<1, 64>>>(d_out);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h.data(), d_out, 64 * sizeof(int), cudaMemcpyDeviceToHost));
        bool right = true;
        for (int i = 0; i < 64; i++) right &= h[i] == 63 - i;
        printf("%s barrier: %s\n", mode, right ? "right" : "WRONG");
        return right ? 0 : 1;
    }
    fprintf(stderr, "usage: %s order|hidden|template\n", argv[0]);
    return 2;
}
