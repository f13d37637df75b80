// A program built with -std=c++11, as Makefiles written for older nvcc releases ask (nccl-tests'
// NVCUFLAGS carried -std=c++11): nvcc accepts the dialect, and cucc compiles it as C++14, the
// oldest dialect its rewritten launches (generic lambdas) and the runtime's headers
// (decltype(auto), std::index_sequence) compile in. It used to fail in the rewritten launch of
// every kernel ("use of 'auto' in lambda parameter declaration only available with -std=c++14").
// The user code below uses nothing newer than C++11.
//! cucc: -std=c++11
//! cpu-only
//! run: ./prog => pass /cxx11: C\+\+14 \(201402\), 4 launches, 1024 elements, sum 523776/
//! run: dev/cpu/cucc -std=gnu++11 -c dev/cpu/tests/cucc_cxx11.cu -o build/cpu/tests/cucc_cxx11_gnu.o && echo gnu++11 built => pass /gnu\+\+11 built/
#include <cstdio>

template <typename T>
__global__ void __launch_bounds__(256) fill_kernel(T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = T(i);
}

__global__ void sum_kernel(const int* in, int n, int* total) {
    __shared__ int partial[32];
    int s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) t += partial[w];
        *total = t;
    }
}

int main() {
    const int n = 1024;
    int* d = nullptr;
    int* total = nullptr;
    cudaMalloc(&d, n * sizeof(int));
    cudaMalloc(&total, sizeof(int));
    int launches = 0;
    fill_kernel<int><<<n / 256, 256>>>(d, n);
    launches++;
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    fill_kernel<<<n / 256, 256, 0, stream>>>(d, n);
    launches++;
    sum_kernel<<<1, 128, 0, stream>>>(d, n, total);
    launches++;
    void* args[] = {(void*)&d, (void*)&n, (void*)&total};
    cudaLaunchKernel((const void*)sum_kernel, dim3(1), dim3(256), args, 0, stream);
    launches++;
    int h = 0;
    cudaMemcpyAsync(&h, total, sizeof(int), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    const cudaError_t err = cudaGetLastError();
    const long dialect = __cplusplus;
    printf("cxx11: C++%s (%ld), %d launches, %d elements, sum %d (%s)\n",
           dialect == 201402L ? "14" : "?", dialect, launches, n, h, cudaGetErrorString(err));
    cudaStreamDestroy(stream);
    cudaFree(total);
    cudaFree(d);
    return err == cudaSuccess && h == n * (n - 1) / 2 && dialect == 201402L ? 0 : 1;
}
