// Inline PTX outside the subset the CPU runtime runs (dev/cpu/include/cucc/ptx.h) is a compile
// error at the file and line of the asm statement, naming the instruction.
//! cpu-only
//! compile: fail /cucc_inline_asm\.cu:9: error: cucc: inline PTX: the PTX instruction 'shfl\.sync\.bfly\.b32' is not supported: the CPU runtime runs the inline PTX subset listed in dev/cpu/include/cucc/ptx\.h/
#include <cstdio>

__device__ unsigned swap_neighbours(unsigned v) {
    unsigned r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
}

__global__ void k(unsigned* out) { out[threadIdx.x] = swap_neighbours(threadIdx.x); }

int main() {
    unsigned* d;
    cudaMalloc(&d, 32 * sizeof(unsigned));
    k<<<1, 32>>>(d);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
