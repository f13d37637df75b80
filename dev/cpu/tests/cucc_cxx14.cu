// A C++14 program builds with -std=c++14, as under nvcc: the runtime's headers (launches with
// their argument tuples, cooperative groups, warp shuffles) ask nothing of C++17.
//! cucc: -std=c++14
//! run: ./prog => pass /cxx14: 3 launches, sums 496 496 496/
#include <cooperative_groups.h>

#include <cstdio>

namespace cg = cooperative_groups;

static_assert(__cplusplus == 201402L, "this test is compiled as C++14");

// Each warp sums its lanes' ids three ways: a shuffle butterfly, cooperative groups' tile
// shuffles, and an atomic.
__global__ void sums_kernel(int* out, float scale, short tag) {
    int v = threadIdx.x;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int w = threadIdx.x;
    for (int offset = 16; offset > 0; offset /= 2) w += warp.shfl_down(w, offset);
    atomicAdd(&out[2], (int)(threadIdx.x * scale) + tag);
    if (threadIdx.x == 0) {
        out[0] = v;
        out[1] = w;
    }
}

int main() {
    int* d = nullptr;
    cudaMalloc(&d, 3 * sizeof(int));
    int launches = 0, h[3] = {};
    for (int i = 0; i < 3; i++, launches++) {
        cudaMemset(d, 0, 3 * sizeof(int));
        sums_kernel<<<1, 32>>>(d, 1.0f, (short)0);
        cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    }
    const cudaError_t err = cudaGetLastError();
    printf("cxx14: %d launches, sums %d %d %d (%s)\n", launches, h[0], h[1], h[2],
           cudaGetErrorString(err));
    cudaFree(d);
    return err == cudaSuccess && h[0] == 496 && h[1] == 496 && h[2] == 496 ? 0 : 1;
}
