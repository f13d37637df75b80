// Warp shuffles with every width (1, 2, 4, ..., 32), every mode (index, up, down, xor), for
// int, float, double, long long, __nv_bfloat16 and __half, including source
// lanes and offsets outside the segment. The host model is CUDA's documented rule: lanes form
// segments of `width`; __shfl_sync reads lane (srcLane mod width) of the caller's segment; up
// and down return the caller's own value when the source leaves the segment; xor may read
// earlier segments but returns the caller's value for later ones (or past lane 31).
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "test_util.h"

enum Mode { kIndex, kUp, kDown, kXor };
const char* kModeNames[] = {"shfl", "shfl_up", "shfl_down", "shfl_xor"};

// Value held by thread t (distinct per thread, exactly representable in every type).
__host__ __device__ int seed_value(int t) { return 3 * t + 1; }

template <class T>
__host__ __device__ T make_value(int v) {
    return (T)v;
}
template <>
__host__ __device__ __nv_bfloat16 make_value<__nv_bfloat16>(int v) {
    return __int2bfloat16_rn(v);
}
template <>
__host__ __device__ __half make_value<__half>(int v) {
    return __int2half_rn(v);
}

template <class T>
__host__ __device__ int value_id(T x) {
    return (int)x;
}
template <>
__host__ __device__ int value_id<__nv_bfloat16>(__nv_bfloat16 x) {
    return (int)__bfloat162float(x);
}
template <>
__host__ __device__ int value_id<__half>(__half x) {
    return (int)__half2float(x);
}

// Each thread shuffles its value with argument b and records which thread's value it got.
template <class T>
__global__ void shuffle_kernel(int* out, Mode mode, int b, int width) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    T v = make_value<T>(seed_value(t));
    T r;
    switch (mode) {
        case kIndex:
            r = __shfl_sync(0xffffffffu, v, b, width);
            break;
        case kUp:
            r = __shfl_up_sync(0xffffffffu, v, (unsigned)b, width);
            break;
        case kDown:
            r = __shfl_down_sync(0xffffffffu, v, (unsigned)b, width);
            break;
        default:
            r = __shfl_xor_sync(0xffffffffu, v, b, width);
            break;
    }
    out[t] = value_id(r);
}

// Thread (within its warp) whose value lane `lane` receives, by the documented rule.
int expected_source(int lane, Mode mode, int b, int width) {
    int segment = lane / width, first = segment * width;
    switch (mode) {
        case kIndex:
            return first + ((b % width) + width) % width;
        case kUp:
            return lane - first >= b ? lane - b : lane;
        case kDown:
            return lane - first + b < width ? lane + b : lane;
        default: {
            int src = lane ^ b;
            return (src > 31 || src / width > segment) ? lane : src;
        }
    }
}

template <class T>
int check_type(const char* type_name, int* d_out) {
    const int warps = 2, n = warps * 32;
    int failures = 0;
    std::vector<int> got(n);
    for (int width = 1; width <= 32; width *= 2)
        for (int mode = kIndex; mode <= kXor; mode++)
            for (int b : {0, 1, 2, 3, 5, 8, 15, 16, 31, 33, -1, -7}) {
                if ((mode == kUp || mode == kDown) && b < 0) continue;
                if (mode == kXor && (b < 0 || b > 31)) continue;
                shuffle_kernel<T><<<1, n>>>(d_out, (Mode)mode, b, width);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
                for (int t = 0; t < n; t++) {
                    int src = (t / 32) * 32 + expected_source(t % 32, (Mode)mode, b, width);
                    if (got[t] != seed_value(src)) {
                        if (failures < 10)
                            printf("%s<%s> width %d b %d thread %d: got value of %d, want %d\n",
                                   kModeNames[mode], type_name, width, b, t, got[t],
                                   seed_value(src));
                        failures++;
                    }
                }
            }
    printf("%-14s %s\n", type_name, failures ? "FAILED" : "ok");
    return failures;
}

// Half-warp shuffles: only lanes 0..15 take part (mask 0x0000ffff), the others do not call.
__global__ void half_warp_kernel(int* out) {
    int lane = threadIdx.x;
    int v = seed_value(lane);
    if (lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 8);
    out[lane] = v;
}

int main() {
    int* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, 64 * sizeof(int)));
    int failures = 0;
    failures += check_type<int>("int", d_out);
    failures += check_type<float>("float", d_out);
    failures += check_type<double>("double", d_out);
    failures += check_type<long long>("long long", d_out);
    failures += check_type<__nv_bfloat16>("__nv_bfloat16", d_out);
    failures += check_type<__half>("__half", d_out);

    half_warp_kernel<<<1, 32>>>(d_out);
    CUDA_CHECK(cudaGetLastError());
    int got[32];
    CUDA_CHECK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));
    for (int lane = 0; lane < 32; lane++) {
        int want = seed_value(lane < 16 ? lane ^ 8 : lane);
        if (got[lane] != want) {
            printf("half-warp xor, lane %d: got %d, want %d\n", lane, got[lane], want);
            failures++;
        }
    }
    CUDA_CHECK(cudaFree(d_out));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
