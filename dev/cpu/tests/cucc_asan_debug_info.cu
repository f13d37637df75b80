// --asan implies -g: built with --asan alone, the AddressSanitizer report of an out-of-bounds
// write in a kernel names the kernel's file and the line of the write (line 11).
//! cpu-only
//! cucc: --asan
//! run: ./prog => fail /heap-buffer-overflow[\s\S]*in write_past_end_kernel[^\n]*cucc_asan_debug_info.cu:11/
#include <cstdio>

__global__ void write_past_end_kernel(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)  // the bug: i == n is one past the end
        x[i] = i;
}

int main() {
    const int n = 100;
    int* d;
    if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return 1;
    write_past_end_kernel<<<1, 128>>>(d, n);
    cudaError_t err = cudaDeviceSynchronize();
    printf("the kernel finished (%s) and the write past the end was not reported\n",
           cudaGetErrorString(err));
    return 0;
}
