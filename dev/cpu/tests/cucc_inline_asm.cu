// Inline PTX has no CPU equivalent: cucc refuses it at compile time with the file and line of
// the asm statement and a hint to guard it.
//! cpu-only
//! compile: fail /cucc_inline_asm\.cu:9: error: cucc: inline PTX has no CPU equivalent; guard it with #ifdef __CUDA_ARCH__/
#include <cstdio>

__device__ unsigned lane_id() {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__global__ void k(unsigned* out) { out[threadIdx.x] = lane_id(); }

int main() {
    unsigned* d;
    cudaMalloc(&d, 32 * sizeof(unsigned));
    k<<<1, 32>>>(d);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
