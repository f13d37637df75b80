// Kernel templates in a file that mentions __CUDA_ARCH__ (compiled by cucc in two passes, see
// "Two passes" in dev/cpu/cucc): the host pass's launches call the device pass's instantiations.
// Small kernel bodies, launched where g++ inlines them into the launch, as llm.c's harnesses
// write them: a template kernel launched from main, one launched from a host function template
// (its type deduced there), one with a function-pointer template argument (a block reduction
// parameterized by its warp reduction), and one launched through cudaLaunchKernel. Each must
// link and compute its sum (these used to fail to link: undefined reference to the kernel).
//! run: ./prog => pass /all two-pass template checks passed/
#include <cstdio>
#include "test_util.h"

// 1 in device code (the device pass defines __CUDA_ARCH__), 0 in host code: a kernel that the
// host pass compiled would scale by 0.
__host__ __device__ float device_side() {
#ifdef __CUDA_ARCH__
    return 1.0f;
#else
    return 0.0f;
#endif
}

using WarpReduction = float (*)(float);

__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <WarpReduction reduce>
__device__ float reduce_warp_with(float v) {
    return reduce(v);
}

template <class T>
__global__ void scaled_store(float* out, const T* in, float scale) {
    out[threadIdx.x] = (float)in[threadIdx.x] * scale * device_side();
}

template <class T>
__global__ void warp_total(float* out, const T* in) {
    float total = reduce_warp_with<warp_sum>((float)in[threadIdx.x]);
    if (threadIdx.x == 0) *out = total;
}

template <class T>
__global__ void count_positive(int* out, const T* in) {
    if (in[threadIdx.x] > 0) atomicAdd(out, 1);
}

template <class T>
void launch_scaled(float* out, const T* in, float scale) {
    scaled_store<<<1, 32>>>(out, in, scale);
}

int main() {
    float *in_f, *out;
    int *in_i, *count;
    CUDA_CHECK(cudaMallocManaged(&in_f, 32 * sizeof(float)));
    CUDA_CHECK(cudaMallocManaged(&in_i, 32 * sizeof(int)));
    CUDA_CHECK(cudaMallocManaged(&out, 32 * sizeof(float)));
    CUDA_CHECK(cudaMallocManaged(&count, sizeof(int)));
    for (int i = 0; i < 32; i++) {
        in_f[i] = (float)(i + 1);
        in_i[i] = i % 3 - 1;  // -1, 0, 1, ...: 10 positive
    }

    scaled_store<<<1, 32>>>(out, in_f, 2.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(out[31] == 64.0f, "template kernel<float> launched from main", std::to_string(out[31]));

    launch_scaled(out, in_i, 3.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(out[31] == 0.0f && out[29] == 3.0f,
           "template kernel<int> launched from a host function template", std::to_string(out[29]));

    warp_total<<<1, 32>>>(out, in_f);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(out[0] == 528.0f, "template kernel with a function-pointer template argument",
           std::to_string(out[0]) + " (expected 528)");

    *count = 0;
    const int* in_const = in_i;
    void* args[] = {&count, &in_const};
    CUDA_CHECK(cudaLaunchKernel((const void*)count_positive<int>, dim3(1), dim3(32), args, 0, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(*count == 10, "template kernel through cudaLaunchKernel",
           std::to_string(*count) + " (expected 10)");

    CUDA_CHECK(cudaFree(in_f));
    CUDA_CHECK(cudaFree(in_i));
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(count));
    return test_report("two-pass template");
}
