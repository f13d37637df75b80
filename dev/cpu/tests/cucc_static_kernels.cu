// Static kernels that are only launched by name go unregistered (cucc's launched_only), so that
// g++ emits a static kernel only where it is launched; any other mention of the name keeps the
// registration, and with it the launches that name a kernel by its address:
//   launched_kernel   launched with <<<>>> only: not registered, runs
//   addressed_kernel  launched through cudaLaunchKernel with its address: registered, runs
//   attribute_kernel  given more dynamic shared memory with cudaFuncSetAttribute, then
//                     launched with <<<>>> past the default 48 KiB: registered, runs
//   unused_kernel     never launched: not registered, and so not in the object at all
//   extern_kernel     not static: registered, as every kernel with external linkage is
//! run: ./prog => pass /all static kernel checks passed/
//! run: d=$(mktemp -d) && dev/cpu/cucc -v -c dev/cpu/tests/cucc_static_kernels.cu -o $d/x.o 2>&1 | grep 'cucc: kernel'; rm -rf $d => pass /kernel addressed_kernel: thread loop\n.*kernel attribute_kernel: thread loops at barriers \(2 regions\)\n.*kernel extern_kernel: thread loop\n.*kernel launched_kernel: thread loop; static and only launched, not registered\n.*kernel unused_kernel: thread loop; static and only launched, not registered\n/
//! run: d=$(mktemp -d) && dev/cpu/cucc -c dev/cpu/tests/cucc_static_kernels.cu -o $d/x.o && nm -C $d/x.o | grep -c unused_kernel; rm -rf $d => pass /^0\n/
#include <cuda_runtime.h>

#include "test_util.h"

static __global__ void launched_kernel(int* out) { out[threadIdx.x] = 1; }

static __global__ void addressed_kernel(int* out) { out[threadIdx.x] = 2; }

static __global__ void attribute_kernel(int* out) {
    extern __shared__ int scratch[];
    scratch[threadIdx.x] = 3;
    __syncthreads();
    out[threadIdx.x] = scratch[threadIdx.x];
}

static __global__ void unused_kernel(int* out) { out[threadIdx.x] = 4; }

__global__ void extern_kernel(int* out) { out[threadIdx.x] = 5; }

// Whether the first n ints at d are all `want`.
static bool all_equal(const int* d, int n, int want) {
    int host[32];
    CUDA_CHECK(cudaMemcpy(host, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (host[i] != want) return false;
    return true;
}

int main() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 32 * sizeof(int)));

    launched_kernel<<<1, 32>>>(d);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(all_equal(d, 32, 1), "a static kernel launched with <<<>>> ran");

    void* args[] = {&d};
    expect(cudaLaunchKernel((const void*)addressed_kernel, dim3(1), dim3(32), args, 0, 0) ==
               cudaSuccess,
           "cudaLaunchKernel found the static kernel whose address the program takes");
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(all_equal(d, 32, 2), "a static kernel launched by its address ran");

    const int smem = 64 * 1024;
    CUDA_CHECK(
        cudaFuncSetAttribute(attribute_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attribute_kernel<<<1, 32, smem>>>(d);
    expect(cudaGetLastError() == cudaSuccess,
           "a static kernel took the dynamic shared memory cudaFuncSetAttribute allowed it");
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(all_equal(d, 32, 3), "that kernel ran");

    expect(
        cudaLaunchKernel((const void*)extern_kernel, dim3(1), dim3(32), args, 0, 0) == cudaSuccess,
        "cudaLaunchKernel found a kernel with external linkage");
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(all_equal(d, 32, 5), "that kernel ran");

    CUDA_CHECK(cudaFree(d));
    return test_report("static kernel");
}
