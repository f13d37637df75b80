// UndefinedBehaviorSanitizer catches a misaligned float4 load, which faults on a GPU (a 16-byte
// access needs a 16-byte aligned address) but works silently on x86.
//! cpu-only
//! cucc: --ubsan -g
//! run: ./prog => fail /misaligned/
#include <cstdio>

__global__ void copy4(const float* in, float* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) reinterpret_cast<float4*>(out)[i] = reinterpret_cast<const float4*>(in)[i];
}

int main() {
    const int n = 1024;
    float *in, *out;
    cudaMalloc(&in, (n + 4) * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    copy4<<<1, n / 4>>>(in + 1, out, n / 4 - 1);  // the bug: in + 1 is only 4-byte aligned
    cudaDeviceSynchronize();
    printf("no error was reported\n");
    return 0;
}
