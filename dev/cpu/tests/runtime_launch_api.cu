// Launches that name a kernel by address and pass `void**` arguments, and the queries around
// launches:
//   - cudaLaunchKernel of a plain, a namespaced, a template (cast to void*) and a struct-taking
//     kernel; cudaLaunchKernelEx (typed template) with launch attributes; bad attributes,
//     unknown functions and missing arguments give CUDA's errors;
//   - __launch_bounds__ is enforced on these launches and reported by cudaFuncGetAttributes;
//   - a kernel that shares its name with a host function launches with <<<>>> and keeps its
//     cudaFuncSetAttribute limit (cucc takes its address through the kernel's signature);
//   - a namespaced kernel (named like a host function, with __launch_bounds__) launched
//     unqualified through a using-declaration;
//   - <<<>>> launches through function pointers (`table[i]<<<...>>>`, `(*fp)<<<...>>>`, a
//     struct member, a call returning a pointer), which still enforce the __launch_bounds__ of
//     the kernel the pointer holds;
//   - occupancy: cudaOccupancyMaxActiveBlocksPerMultiprocessor, ...AvailableDynamicSMemPerBlock,
//     and the toolkit's cudaOccupancyMaxPotentialBlockSize on top of them (H100: 2048 threads,
//     32 blocks and 228 KiB of shared memory per SM, 1 KiB reserved per block);
//   - cooperative launches: this_grid().sync() across 12 and 1056 blocks, the co-residency limit
//     (cudaErrorCooperativeLaunchTooLarge), and grid.sync() in a kernel not launched
//     cooperatively is an error.
//! cpu-only
//! run: ./prog => pass /all launch API checks passed/
//! run: ./prog grid-sync-plain => fail /kernel grid_sum_kernel calls this_grid\(\).sync\(\) but was not launched cooperatively/
#include <cstdio>
#include <cstring>
#include <vector>
#include <cooperative_groups.h>
#include "test_util.h"

namespace cg = cooperative_groups;

struct Affine {
    float scale;
    double shift;
    int count;
};

__global__ void set_kernel(int* out, int value) { out[threadIdx.x] = value + (int)threadIdx.x; }
namespace ops {
__global__ void affine_kernel(float* out, Affine a) {
    for (int i = 0; i < a.count; i++) out[i] = a.scale * i + (float)a.shift;
}
}  // namespace ops
template <typename T, int N>
__global__ void times_kernel(T* out, T v) {
    out[threadIdx.x] = v * N;
}
__global__ void __launch_bounds__(64) bounded_kernel(int* out) { out[threadIdx.x] = 1; }

// A host function and a kernel of the same name.
void scale(float* x, int n) {
    for (int i = 0; i < n; i++) x[i] *= 2;
}
__global__ void scale(float* x, int n, float f) {
    extern __shared__ float tmp[];
    int i = threadIdx.x;
    tmp[i] = i < n ? x[i] * f : 0;
    if (i < n) x[i] = tmp[i];
}

// Block sums, a grid-wide barrier, then block 0 adds the partial sums.
__global__ void grid_sum_kernel(const int* in, int* partial, int* total, int* valid) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    __shared__ int sum;
    if (block.thread_rank() == 0) sum = 0;
    block.sync();
    atomicAdd(&sum, in[grid.thread_rank()]);
    block.sync();
    if (block.thread_rank() == 0) partial[blockIdx.x] = sum;
    if (grid.thread_rank() == 0) *valid = grid.is_valid() * 100 + (int)grid.num_blocks();
    grid.sync();
    if (grid.thread_rank() == 0) {
        int t = 0;
        for (unsigned b = 0; b < grid.num_blocks(); b++) t += partial[b];
        *total = t;
    }
}

static void void_pointer_launches() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(int)));
    int value = 7, h[4];
    void* args[] = {&d, &value};
    CUDA_CHECK(cudaLaunchKernel((const void*)set_kernel, dim3(1), dim3(4), args, 0, 0));
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 7 && h[3] == 10, "cudaLaunchKernel of a plain kernel");

    int v = 3;
    void* targs[] = {&d, &v};
    CUDA_CHECK(cudaLaunchKernel((void*)times_kernel<int, 5>, 1, 2, targs));
    CUDA_CHECK(cudaMemcpy(h, d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    expect(h[0] == 15 && h[1] == 15, "cudaLaunchKernel of a template kernel cast to void*");

    float* f;
    CUDA_CHECK(cudaMalloc(&f, 4 * sizeof(float)));
    Affine a{0.5f, 2.25, 4};
    void* aargs[] = {&f, &a};
    CUDA_CHECK(cudaLaunchKernel((void*)ops::affine_kernel, 1, 1, aargs));
    float hf[4];
    CUDA_CHECK(cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
    expect(hf[0] == 2.25f && hf[3] == 3.75f,
           "cudaLaunchKernel of a namespaced kernel taking a struct");

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1);
    config.blockDim = dim3(3);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, set_kernel, d, 100));
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 100 && h[2] == 102 && h[3] == 10,
           "cudaLaunchKernelEx with typed arguments and a cluster attribute");
    config.gridDim = dim3(3);
    attr[0].val.clusterDim.x = 2;
    expect_error(cudaLaunchKernelEx(&config, set_kernel, d, 1), cudaErrorInvalidValue,
                 "a cluster that does not divide the grid");
    attr[0].id = (cudaLaunchAttributeID)99;
    expect_error(cudaLaunchKernelEx(&config, set_kernel, d, 1), cudaErrorInvalidValue,
                 "an unknown launch attribute");

    expect_error(cudaLaunchKernel((const void*)&check_cuda, 1, 1, args),
                 cudaErrorInvalidDeviceFunction, "cudaLaunchKernel of a host function");
    expect_error(cudaLaunchKernel((const void*)set_kernel, 1, 1, nullptr), cudaErrorInvalidValue,
                 "cudaLaunchKernel without arguments");
    expect_error(cudaLaunchKernel((const void*)set_kernel, dim3(1), dim3(2048), args),
                 cudaErrorInvalidConfiguration, "cudaLaunchKernel with 2048 threads");
    void* bargs[] = {&d};
    expect_error(cudaLaunchKernel((const void*)bounded_kernel, 1, 128, bargs),
                 cudaErrorLaunchOutOfResources, "128 threads for __launch_bounds__(64)");
    CUDA_CHECK(cudaLaunchKernel((const void*)bounded_kernel, 1, 64, bargs));
    cudaFuncAttributes fa;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, bounded_kernel));
    const char* name = nullptr;
    CUDA_CHECK(cudaFuncGetName(&name, (const void*)bounded_kernel));
    expect(fa.maxThreadsPerBlock == 64 && name && strstr(name, "bounded_kernel"),
           "cudaFuncGetAttributes reports the bound, cudaFuncGetName the name");

    // The kernel named like a host function: launch with 60 KiB of dynamic shared memory,
    // allowed only through its own attribute.
    CUDA_CHECK(cudaMemcpy(f, hf, sizeof hf, cudaMemcpyHostToDevice));
    scale<<<1, 4, 60 * 1024>>>(f, 4, 2.0f);
    expect_error(cudaGetLastError(), cudaErrorInvalidValue,
                 "60 KiB of shared memory before cudaFuncSetAttribute");
    void (*scale_kernel)(float*, int, float) = scale;  // the kernel out of the overload set
    CUDA_CHECK(
        cudaFuncSetAttribute(scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 61440));
    scale<<<1, 4, 60 * 1024>>>(f, 4, 2.0f);
    CUDA_CHECK(cudaGetLastError());
    float back[4];
    CUDA_CHECK(cudaMemcpy(back, f, sizeof back, cudaMemcpyDeviceToHost));
    std::vector<float> host(hf, hf + 4);
    scale(host.data(), 4);
    expect(back[1] == host[1] && back[3] == host[3],
           "a kernel named like a host function: launched, attribute found");
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(f));
}

// A kernel in a namespace, launched unqualified through a using-declaration, with a host
// function of the same name beside it and a __launch_bounds__.
namespace launch_ns {
__global__ void __launch_bounds__(32) ns_fill(int* out, int v) { out[threadIdx.x] = v; }
void ns_fill(int* out) { out[0] = -1; }
}  // namespace launch_ns
using launch_ns::ns_fill;

typedef void (*set_fn)(int*, int);
struct Launcher {
    set_fn fn;
};
static set_fn pick_set_kernel(int) { return set_kernel; }

// Launches through function pointer expressions: the value decides which kernel runs.
static void pointer_launches() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 4 * sizeof(int)));
    set_fn table[2] = {set_kernel, set_kernel};
    int h[4];
    for (int i = 0; i < 2; i++) table[i]<<<1, 4>>>(d, 10 * i);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 10 && h[3] == 13, "table[i]<<<...>>>");
    set_fn fp = set_kernel;
    (*fp)<<<1, 4>>>(d, 20);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 20 && h[3] == 23, "(*fp)<<<...>>>");
    Launcher l{set_kernel};
    Launcher* lp = &l;
    lp->fn<<<1, 4>>>(d, 30);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 30 && h[3] == 33, "lp->fn<<<...>>>");
    pick_set_kernel(0)<<<1, 4>>>(d, 40);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 40 && h[3] == 43, "pick(0)<<<...>>>");
    ns_fill<<<1, 4>>>(d, 50);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 50 && h[3] == 50, "a namespaced kernel launched through a using-declaration");
    ns_fill<<<1, 64>>>(d, 51);
    expect_error(cudaGetLastError(), cudaErrorLaunchOutOfResources,
                 "64 threads for its __launch_bounds__(32)");
    void (*bounded)(int*) = bounded_kernel;
    bounded<<<1, 128>>>(d);
    expect_error(cudaGetLastError(), cudaErrorLaunchOutOfResources,
                 "128 threads through a pointer to a __launch_bounds__(64) kernel");
    CUDA_CHECK(cudaFree(d));
}

static void occupancy() {
    int n;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, set_kernel, 256, 0));
    bool ok = n == 8;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, set_kernel, 1024, 0));
    ok &= n == 2;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, set_kernel, 32, 0));
    ok &= n == 32;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, set_kernel, 128, 48 * 1024));
    ok &= n == 4;  // 228 KiB / (48 + 1) KiB
    expect(ok, "resident blocks per SM: 256 -> 8, 1024 -> 2, 32 -> 32, 128 with 48 KiB -> 4");
    size_t smem;
    CUDA_CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&smem, set_kernel, 2, 256));
    bool limited = smem == 48 * 1024;
    CUDA_CHECK(
        cudaFuncSetAttribute(set_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CUDA_CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&smem, set_kernel, 2, 256));
    expect(limited && smem == 228 * 1024 / 2 - 1024,
           "dynamic shared memory for 2 blocks per SM: 48 KiB by default, 113 KiB after opt-in");
    int min_grid = 0, block = 0;
    CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, set_kernel, 0, 0));
    expect(block == 1024 && min_grid == 2 * 132, "cudaOccupancyMaxPotentialBlockSize",
           std::to_string(min_grid) + " blocks of " + std::to_string(block));
    expect_error(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, set_kernel, 0, 0),
                 cudaErrorInvalidValue, "occupancy of 0-thread blocks");
}

// grid_sum_kernel launched cooperatively twice on `blocks` blocks of `threads`.
static void cooperative_sum(int blocks, int threads) {
    const int n = blocks * threads;
    std::vector<int> in(n);
    int want = 0;
    for (int i = 0; i < n; i++) want += in[i] = i % 17 - 3;
    int *d_in, *d_partial, *d_total, *d_valid;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_partial, blocks * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_total, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_valid, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    for (int round = 0; round < 2; round++) {
        void* args[] = {&d_in, &d_partial, &d_total, &d_valid};
        CUDA_CHECK(cudaMemset(d_total, 0, sizeof(int)));
        CUDA_CHECK(cudaLaunchCooperativeKernel((void*)grid_sum_kernel, blocks, threads, args));
        int total, valid;
        CUDA_CHECK(cudaMemcpy(&total, d_total, sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&valid, d_valid, sizeof(int), cudaMemcpyDeviceToHost));
        char what[128];
        snprintf(what, sizeof what,
                 "cooperative launch%s: %d blocks of %d meet at this_grid().sync()",
                 round ? " again (the grid barrier starts afresh)" : "", blocks, threads);
        expect(total == want && valid == 100 + blocks, what,
               std::to_string(total) + " (want " + std::to_string(want) + ")");
    }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_partial));
    CUDA_CHECK(cudaFree(d_total));
    CUDA_CHECK(cudaFree(d_valid));
}

// Cooperative grids: a small one, one of 1056 co-resident blocks (8 per SM, 67584 threads all
// suspended at once at the grid barrier: more fiber stacks than the process may give guard
// pages), and one that cannot be co-resident.
static void cooperative() {
    cooperative_sum(12, 64);
    cooperative_sum(8 * 132, 64);
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 4096));
    int *d_in = d, *d_partial = d + 256, *d_total = d + 512, *d_valid = d + 513;
    int per_sm;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum_kernel, 1024, 0));
    void* args[] = {&d_in, &d_partial, &d_total, &d_valid};
    expect_error(cudaLaunchCooperativeKernel((void*)grid_sum_kernel, per_sm * 132 + 1, 1024, args),
                 cudaErrorCooperativeLaunchTooLarge, "a cooperative grid larger than fits");
    CUDA_CHECK(cudaFree(d));
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "grid-sync-plain")) {
        int* d;
        CUDA_CHECK(cudaMalloc(&d, 4096));
        grid_sum_kernel<<<2, 32>>>(d, d + 256, d + 512, d + 513);
        CUDA_CHECK(cudaDeviceSynchronize());
        return 0;
    }
    void_pointer_launches();
    pointer_launches();
    occupancy();
    cooperative();
    return test_report("launch API");
}
