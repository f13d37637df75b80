// Divergence inside a warp, as sm_70+ GPUs behave:
//   - __activemask() and coalesced_threads() inside a branch give the lanes that took that side
//     (a 32-lane branch on lane parity: 0xaaaaaaaa for the odd lanes, 0x55555555 for the even
//     ones; the same for the 16 lanes of a partial warp);
//   - warp-aggregated atomics (the __activemask/__ffs leader pattern and the coalesced_group
//     one) hand out every slot exactly once;
//   - a full-mask shuffle, ballot, vote or __reduce_add_sync after some lanes returned waits only
//     for the lanes still running (the PTX ISA's sync instructions wait for the non-exited
//     threads of the mask), and so does a full-mask warp reduction in a partial last warp.
// The host computes every expected value.
//! run: ./prog => pass /all divergence checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=5 ./prog => pass /all divergence checks passed/
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "test_util.h"

namespace cg = cooperative_groups;

// out[t] = the mask the thread saw, from __activemask (slot t) and coalesced_threads (slot
// blockDim + t), in a branch on lane parity.
__global__ void parity_kernel(unsigned* out) {
    unsigned t = threadIdx.x;
    if (t % 2) {
        out[t] = __activemask();
        cg::coalesced_group g = cg::coalesced_threads();
        out[blockDim.x + t] = g.size() * 1000 + g.thread_rank();
    } else {
        out[t] = __activemask();
        cg::coalesced_group g = cg::coalesced_threads();
        out[blockDim.x + t] = g.size() * 1000 + g.thread_rank();
    }
}

// The classic warp-aggregated increment: one atomic per group of lanes that reach it together.
__device__ int aggregated_increment(int* counter) {
    unsigned mask = __activemask();
    int leader = __ffs(mask) - 1;
    int lane = threadIdx.x % 32;
    int base = 0;
    if (lane == leader) base = atomicAdd(counter, __popc(mask));
    base = __shfl_sync(mask, base, leader);
    return base + __popc(mask & ((1u << lane) - 1u));
}

// The same with cooperative groups.
__device__ int aggregated_increment_cg(int* counter) {
    cg::coalesced_group g = cg::coalesced_threads();
    int base = 0;
    if (g.thread_rank() == 0) base = atomicAdd(counter, g.size());
    return g.shfl(base, 0) + g.thread_rank();
}

// Stream compaction: each element above the threshold gets a slot of `kept`.
__global__ void compact_kernel(const int* in, int n, int threshold, int* counter, int* kept,
                               int use_cg) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && in[i] > threshold) {
        int slot = use_cg ? aggregated_increment_cg(counter) : aggregated_increment(counter);
        kept[slot] = in[i];
    }
}

// Lanes from `live` on return; the others shuffle, vote and reduce with a full mask.
__global__ void exited_lanes_kernel(int* out, int live) {
    int lane = threadIdx.x % 32;
    if (lane >= live) return;
    int v = lane + 1;
    for (int offset = 1; offset < 32; offset *= 2) {
        int other = __shfl_xor_sync(0xffffffffu, v, offset);
        if ((lane ^ offset) < live) v += other;  // only partners that are still running
    }
    out[lane * 5 + 0] = v;
    out[lane * 5 + 1] = (int)__ballot_sync(0xffffffffu, 1);
    out[lane * 5 + 2] =
        __all_sync(0xffffffffu, lane < live) * 10 + __any_sync(0xffffffffu, lane == 3);
    out[lane * 5 + 3] = (int)__reduce_add_sync(0xffffffffu, (unsigned)lane);
    out[lane * 5 + 4] = __shfl_sync(0xffffffffu, lane * 3, 0);
}

// A full-mask warp sum in a block whose last warp is partial (values from lanes that do not
// exist are undefined, so they are not added).
__global__ void partial_warp_kernel(int* out) {
    int lane = threadIdx.x % 32;
    int lanes = min(32, (int)blockDim.x - (int)threadIdx.x / 32 * 32);
    int v = threadIdx.x + 1;
    for (int offset = 16; offset > 0; offset /= 2) {
        int other = __shfl_down_sync(0xffffffffu, v, offset);
        if (lane + offset < lanes) v += other;
    }
    if (lane == 0) out[threadIdx.x / 32] = v;
}

static void parity() {
    for (int threads : {32, 48}) {
        unsigned* d;
        CUDA_CHECK(cudaMalloc(&d, 2 * threads * sizeof(unsigned)));
        parity_kernel<<<1, threads>>>(d);
        std::vector<unsigned> h(2 * threads);
        CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int t = 0; t < threads; t++) {
            int lanes = std::min(32, threads - t / 32 * 32);
            unsigned side = 0;
            for (int l = t % 2; l < lanes; l += 2) side |= 1u << l;
            int rank = (t % 32) / 2;
            wrong += h[t] != side;
            wrong += h[threads + t] != (unsigned)(__builtin_popcount(side) * 1000 + rank);
        }
        char what[128];
        snprintf(what, sizeof what,
                 "%d threads: __activemask and coalesced_threads in a parity branch "
                 "(lane 1 sees 0x%08x, lane 0 0x%08x)",
                 threads, h[1], h[0]);
        expect(wrong == 0, what, std::to_string(wrong) + " wrong");
        CUDA_CHECK(cudaFree(d));
    }
}

static void aggregated_atomics() {
    const int n = 5000, threshold = 40;
    std::vector<int> in(n);
    for (int i = 0; i < n; i++) in[i] = (i * 7919 + 13) % 101;
    std::vector<int> want;
    for (int v : in)
        if (v > threshold) want.push_back(v);
    std::sort(want.begin(), want.end());
    int *d_in, *d_counter, *d_kept;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_counter, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_kept, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    for (int use_cg = 0; use_cg < 2; use_cg++) {
        CUDA_CHECK(cudaMemset(d_counter, 0, sizeof(int)));
        CUDA_CHECK(cudaMemset(d_kept, 0xff, n * sizeof(int)));
        compact_kernel<<<(n + 127) / 128, 128>>>(d_in, n, threshold, d_counter, d_kept, use_cg);
        int count;
        std::vector<int> kept(n);
        CUDA_CHECK(cudaMemcpy(&count, d_counter, sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(kept.data(), d_kept, n * sizeof(int), cudaMemcpyDeviceToHost));
        std::vector<int> got(kept.begin(), kept.begin() + std::min(count, n));
        std::sort(got.begin(), got.end());
        char what[128];
        snprintf(what, sizeof what, "warp-aggregated atomics (%s): %d of %d elements kept",
                 use_cg ? "coalesced_group" : "__activemask + __ffs", count, (int)want.size());
        expect(count == (int)want.size() && got == want, what);
    }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_counter));
    CUDA_CHECK(cudaFree(d_kept));
}

static void exited_lanes() {
    for (int live : {20, 1, 31}) {
        int* d;
        CUDA_CHECK(cudaMalloc(&d, 32 * 5 * sizeof(int)));
        exited_lanes_kernel<<<1, 32>>>(d, live);
        std::vector<int> h(32 * 5);
        CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
        // The butterfly as the kernel runs it, partners that returned skipped.
        std::vector<int> sum(32);
        for (int lane = 0; lane < 32; lane++) sum[lane] = lane + 1;
        for (int offset = 1; offset < 32; offset *= 2) {
            std::vector<int> next = sum;
            for (int lane = 0; lane < live; lane++)
                if ((lane ^ offset) < live) next[lane] += sum[lane ^ offset];
            sum = next;
        }
        int wrong = 0;
        for (int lane = 0; lane < live; lane++) {
            const int* o = &h[lane * 5];
            unsigned ballot = live == 32 ? 0xffffffffu : (1u << live) - 1u;
            wrong += o[0] != sum[lane];
            wrong += (unsigned)o[1] != ballot;
            wrong += o[2] != 10 + (live > 3 ? 1 : 0);
            wrong += o[3] != live * (live - 1) / 2;
            wrong += o[4] != 0;
        }
        char what[96];
        snprintf(what, sizeof what, "%d running lanes: full-mask shuffles, votes, reduce", live);
        expect(wrong == 0, what, std::to_string(wrong) + " wrong");
        CUDA_CHECK(cudaFree(d));
    }
}

static void partial_warp() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(int)));
    partial_warp_kernel<<<1, 40>>>(d);
    int h[2];
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int want0 = 32 * 33 / 2, want1 = 0;
    for (int t = 32; t < 40; t++) want1 += t + 1;
    expect(h[0] == want0 && h[1] == want1, "full-mask warp sum in a partial warp of 8 lanes",
           std::to_string(h[0]) + ", " + std::to_string(h[1]));
    CUDA_CHECK(cudaFree(d));
}

int main() {
    parity();
    aggregated_atomics();
    exited_lanes();
    partial_warp();
    return test_report("divergence");
}
