// cudaLaunchKernel and cudaLaunchKernelEx (kernel and arguments as `void*`s) cannot call a
// kernel on the CPU runtime, which needs the parameter types: they link, return
// cudaErrorNotSupported, say on stderr to use <<<>>> instead, and do not run the kernel.
//! cpu-only
//! run: ./prog => pass /cucc: cudaLaunchKernel is not supported on the CPU runtime; launch with kernel<<<grid, block, shared_bytes, stream>>>\(args...\) instead[\s\S]*cudaLaunchKernelEx is not supported/
#include <cstdio>

__global__ void set_kernel(int* out, int value) { *out = value; }

int main() {
    int* d;
    int value = 7, back = -1;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess || cudaMemset(d, 0, sizeof(int)) != cudaSuccess)
        return 1;
    void* args[] = {&d, &value};
    cudaError_t plain = cudaLaunchKernel((const void*)set_kernel, dim3(1), dim3(1), args, 0, 0);
    cudaError_t last = cudaGetLastError();
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1);
    config.blockDim = dim3(1);
    cudaError_t ex = cudaLaunchKernelEx(&config, set_kernel, d, value);
    cudaGetLastError();
    if (cudaMemcpy(&back, d, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    printf(
        "cudaLaunchKernel: %s (last error %s), cudaLaunchKernelEx: %s, kernel wrote %d (want 0)\n",
        cudaGetErrorName(plain), cudaGetErrorName(last), cudaGetErrorName(ex), back);
    return plain == cudaErrorNotSupported && last == cudaErrorNotSupported &&
                   ex == cudaErrorNotSupported && back == 0
               ? 0
               : 1;
}
