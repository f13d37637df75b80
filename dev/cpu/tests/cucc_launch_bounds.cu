// __launch_bounds__(N): a launch with more than N threads per block fails as on a GPU
// (cudaErrorLaunchOutOfResources, "too many resources requested for launch"), the kernel does
// not run, the error is not sticky, and launches within the bound run. Covered: the bound
// between `void` and the name, before __global__, from a template parameter (explicit and
// deduced template arguments), a forward declaration without the bound, an overload without
// a bound next to one with, a namespace-qualified launch and a 3-D block.
//! run: ./prog => pass
#include <cstdio>
#include <cstring>

__global__ void __launch_bounds__(256) bounded_kernel(int* flag) { atomicAdd(flag, 1); }

__launch_bounds__(128, 2) __global__ void bound_first_kernel(int* flag) { atomicAdd(flag, 1); }

template <int N>
__global__ void __launch_bounds__(N) template_bound_kernel(int* flag) {
    atomicAdd(flag, 1);
}

template <class T>
__global__ void __launch_bounds__(64) deduced_kernel(T* flag) {
    atomicAdd(flag, (T)1);
}

__global__ void declared_first_kernel(int* flag);
__global__ void __launch_bounds__(32) declared_first_kernel(int* flag) { atomicAdd(flag, 1); }

// Overloads: only the int* one is bounded.
__global__ void __launch_bounds__(96) overloaded_kernel(int* flag) { atomicAdd(flag, 1); }
__global__ void overloaded_kernel(unsigned* flag) { atomicAdd(flag, 1u); }

namespace inner {
__global__ void __launch_bounds__(512) namespaced_kernel(int* flag) { atomicAdd(flag, 1); }
}  // namespace inner

int failures = 0;

// Checks the error of the launch just made, and how many threads ran (counted in *flag).
void expect(const char* what, int* flag, cudaError_t want, int want_threads) {
    cudaError_t got = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    int ran = -1;
    cudaMemcpy(&ran, flag, sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemset(flag, 0, sizeof(int));
    bool ok = got == want && sync == cudaSuccess && ran == want_threads;
    if (!ok) failures++;
    printf("%s %s: %s (%s), synchronize %s, %d threads ran (want %s, %d)\n", ok ? "ok  " : "FAIL",
           what, cudaGetErrorName(got), cudaGetErrorString(got), cudaGetErrorName(sync), ran,
           cudaGetErrorName(want), want_threads);
}

int main() {
    int* flag;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess ||
        cudaMemset(flag, 0, sizeof(int)) != cudaSuccess)
        return 1;
    const cudaError_t too_many = cudaErrorLaunchOutOfResources;
    bounded_kernel<<<1, 512>>>(flag);
    expect("bound 256, 512 threads", flag, too_many, 0);
    bounded_kernel<<<2, 256>>>(flag);
    expect("bound 256, 256 threads", flag, cudaSuccess, 512);
    bounded_kernel<<<1, dim3(8, 8, 5)>>>(flag);
    expect("bound 256, 8x8x5 threads", flag, too_many, 0);
    bound_first_kernel<<<1, 129>>>(flag);
    expect("bound 128 before __global__, 129 threads", flag, too_many, 0);
    bound_first_kernel<<<1, 128>>>(flag);
    expect("bound 128 before __global__, 128 threads", flag, cudaSuccess, 128);
    template_bound_kernel<64><<<1, 65>>>(flag);
    expect("template bound 64, 65 threads", flag, too_many, 0);
    template_bound_kernel<1024><<<1, 1000>>>(flag);
    expect("template bound 1024, 1000 threads", flag, cudaSuccess, 1000);
    deduced_kernel<<<1, 96>>>(flag);
    expect("deduced template, bound 64, 96 threads", flag, too_many, 0);
    deduced_kernel<<<1, 64>>>(flag);
    expect("deduced template, bound 64, 64 threads", flag, cudaSuccess, 64);
    declared_first_kernel<<<1, 33>>>(flag);
    expect("declared before, bound 32, 33 threads", flag, too_many, 0);
    overloaded_kernel<<<1, 97>>>(flag);
    expect("bounded overload, bound 96, 97 threads", flag, too_many, 0);
    overloaded_kernel<<<1, 97>>>((unsigned*)flag);
    expect("unbounded overload, 97 threads", flag, cudaSuccess, 97);
    inner::namespaced_kernel<<<1, 1024>>>(flag);
    expect("namespace, bound 512, 1024 threads", flag, too_many, 0);
    inner::namespaced_kernel<<<1, 512>>>(flag);
    expect("namespace, bound 512, 512 threads", flag, cudaSuccess, 512);
    printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
