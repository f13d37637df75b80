// AddressSanitizer catches an out-of-bounds write in a kernel: the last thread writes one
// element past the end of a cudaMalloc'd array.
//! cpu-only
//! cucc: --asan -g
//! run: ./prog => fail /heap-buffer-overflow/
#include <cstdio>

__global__ void off_by_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f;  // the bug: i == n is one past the end
}

int main() {
    const int n = 1000;
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    off_by_one<<<(n + 255) / 256, 256>>>(d, n);
    cudaDeviceSynchronize();
    printf("no error was reported\n");
    return 0;
}
