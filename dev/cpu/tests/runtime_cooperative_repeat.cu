// Repeated cooperative launches, as cuda-samples' reductionMultiBlockCG makes them (100 launches
// of a grid of every co-resident block): each launch of a grid of 132 blocks of 1024 threads
// sums its input across this_grid().sync() and must give the exact sum; two host threads launch
// such grids at the same time on streams of their own. The OS threads that run the blocks are
// kept between launches with the fiber stacks they mapped (dev/cpu/runtime/launch.cpp), so a
// launch costs the fibers' work rather than 135k stack mappings: the process's CPU time per
// launch is printed and must stay under 1 s (it was over 1 s, most of it in the kernel's
// mmap/mprotect/munmap, when each launch made its threads anew).
//! cpu-only
//! run: ./prog => pass /all runtime_cooperative_repeat checks passed/
#include <sys/resource.h>

#include <cooperative_groups.h>
#include <string>
#include <thread>
#include "test_util.h"

namespace cg = cooperative_groups;

constexpr int kBlocks = 132, kThreads = 1024, kLaunches = 10;

// out[0] = sum of in[0..n): each block sums its share into partial[blockIdx.x], then after the
// grid barrier block 0 adds the partial sums.
__global__ void grid_sum(const int* in, int n, int* partial, long long* out) {
    cg::grid_group grid = cg::this_grid();
    __shared__ int block_total;
    if (threadIdx.x == 0) block_total = 0;
    __syncthreads();
    int mine = 0;
    for (int i = (int)grid.thread_rank(); i < n; i += (int)grid.size()) mine += in[i];
    atomicAdd(&block_total, mine);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = block_total;
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        long long total = 0;
        for (unsigned b = 0; b < gridDim.x; b++) total += partial[b];
        *out = total;
    }
}

double cpu_seconds() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Launches the grid `launches` times on its own stream; returns how many sums were right.
int launch_repeatedly(const int* in, int n, long long want, int launches) {
    int* partial;
    long long* out;
    cudaStream_t stream;
    CUDA_CHECK(cudaMalloc(&partial, kBlocks * sizeof(int)));
    CUDA_CHECK(cudaMallocManaged(&out, sizeof(long long)));
    CUDA_CHECK(cudaStreamCreate(&stream));
    int right = 0;
    for (int l = 0; l < launches; l++) {
        *out = -1;
        void* args[] = {(void*)&in, (void*)&n, (void*)&partial, (void*)&out};
        CUDA_CHECK(cudaLaunchCooperativeKernel((void*)grid_sum, dim3(kBlocks), dim3(kThreads), args,
                                               0, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        right += *out == want;
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(partial));
    CUDA_CHECK(cudaFree(out));
    return right;
}

int main() {
    const int n = 1 << 20;
    int* in;
    CUDA_CHECK(cudaMallocManaged(&in, n * sizeof(int)));
    long long want = 0;
    for (int i = 0; i < n; i++) want += in[i] = i % 7 - 3;

    launch_repeatedly(in, n, want, 1);  // the first launch makes the threads and their stacks
    double start = cpu_seconds();
    int right = launch_repeatedly(in, n, want, kLaunches);
    double per_launch = (cpu_seconds() - start) / kLaunches;
    expect(right == kLaunches, "repeated cooperative launches summed right",
           std::to_string(right) + " of " + std::to_string(kLaunches));
    char detail[96];
    snprintf(detail, sizeof detail, "%.3f s of CPU per launch of %d x %d threads (bound 1 s)",
             per_launch, kBlocks, kThreads);
    expect(per_launch < 1.0, "a repeated cooperative launch reuses its threads", detail);

    int right_a = 0, right_b = 0;
    std::thread a([&] { right_a = launch_repeatedly(in, n, want, 3); });
    std::thread b([&] { right_b = launch_repeatedly(in, n, want, 3); });
    a.join();
    b.join();
    expect(right_a == 3 && right_b == 3, "cooperative grids launched by two host threads at once",
           std::to_string(right_a) + " and " + std::to_string(right_b) + " of 3");
    CUDA_CHECK(cudaFree(in));
    return test_report("runtime_cooperative_repeat");
}
