// Cooperative groups beyond warp-sized tiles:
//   - tiled_partition<N> for N = 64 .. 1024 (from this_thread_block(block_tile_memory) too):
//     thread_rank, num_threads, meta_group_rank/size, shfl, any, all, sync, cg::reduce and the
//     inclusive/exclusive scans;
//   - a thread_group from tiled_partition(block, 128) passed to a function taking thread_group;
//   - coalesced groups: tiled_partition of one, labeled_partition and binary_partition of a
//     tile, ballot and reduce over them;
//   - the sm_80 warp reductions __reduce_{add,min,max}_sync (int and unsigned) and
//     __reduce_{and,or,xor}_sync with full and partial masks, and __match_any/all_sync;
//   - cg::memcpy_async into shared memory by a block and by 32-thread tiles, byte counts that
//     are not multiples of 16, double-buffered with wait_prior<1> and wait.
// The host computes every expected value from each thread's rank.
//! run: ./prog => pass /all tile checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=2 ./prog => pass /all tile checks passed/
#include <cstdio>
#include <vector>
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include "test_util.h"

namespace cg = cooperative_groups;

const int kFields = 10;

__host__ __device__ int input_of(int r) { return (r * 53 + 7) % 97; }

template <int N>
__global__ void big_tile_kernel(int* out) {
    __shared__ cg::block_tile_memory<1024> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
    int r = block.thread_rank(), v = input_of(r);
    int* o = out + (size_t)r * kFields;
    o[0] = tile.thread_rank();
    o[1] = tile.num_threads();
    o[2] = tile.meta_group_rank() * 100 + tile.meta_group_size();
    o[3] = tile.shfl(v, N - 1);
    o[4] = tile.any(v == 96) * 10 + tile.all(v < 97);
    o[5] = cg::reduce(tile, v, cg::plus<int>());
    o[6] = cg::reduce(tile, v, cg::greater<int>());
    o[7] = cg::inclusive_scan(tile, v);
    o[8] = cg::exclusive_scan(tile, v);
    // Each thread writes its tile's shared slot only after the tile synchronizes.
    __shared__ int last[1024];
    last[r] = v;
    tile.sync();
    o[9] = last[tile.meta_group_rank() * N + (tile.thread_rank() + 1) % N];
}

// The CUDA programming guide's reduce over any thread_group, through shared memory.
__device__ int group_sum(cg::thread_group g, int* temp, int val) {
    int lane = g.thread_rank();
    for (int i = g.size() / 2; i > 0; i /= 2) {
        temp[lane] = val;
        g.sync();
        if (lane < i) val += temp[lane + i];
        g.sync();
    }
    return val;
}

__global__ void thread_group_kernel(int* out) {
    __shared__ int temp[1024];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_group tile = cg::tiled_partition(block, 128);
    int r = block.thread_rank();
    int* my_temp = temp + (r / 128) * 128;
    out[r] = group_sum(tile, my_temp, input_of(r));
}

__global__ void partition_kernel(int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int r = block.thread_rank(), v = input_of(r);
    int* o = out + r * 6;
    cg::coalesced_group label = cg::labeled_partition(warp, v % 3);
    o[0] = label.size() * 100 + label.thread_rank();
    o[1] = cg::reduce(label, v, cg::plus<int>());
    cg::coalesced_group half = cg::binary_partition(warp, v % 2);
    o[2] = (int)half.ballot(v > 50);
    if (r % 4 != 3) {
        cg::coalesced_group active = cg::coalesced_threads();
        cg::coalesced_group quads = cg::tiled_partition(active, 4);
        o[3] = quads.size() * 100 + quads.thread_rank() * 10 + quads.meta_group_rank();
        o[4] = cg::reduce(quads, v, cg::plus<int>());
    }
    o[5] = warp.match_any(v % 5);
}

__global__ void warp_reduce_kernel(unsigned* out, unsigned mask) {
    int lane = threadIdx.x;
    if (!(mask >> lane & 1u)) return;
    unsigned u = (unsigned)input_of(lane) * 40503u;
    int s = input_of(lane) - 48;
    unsigned* o = out + lane * 9;
    o[0] = __reduce_add_sync(mask, u);
    o[1] = __reduce_min_sync(mask, u);
    o[2] = __reduce_max_sync(mask, u);
    o[3] = (unsigned)__reduce_add_sync(mask, s);
    o[4] = (unsigned)__reduce_min_sync(mask, s);
    o[5] = (unsigned)__reduce_max_sync(mask, s);
    o[6] = __reduce_and_sync(mask, u) ^ (__reduce_or_sync(mask, u) << 1);
    o[7] = __reduce_xor_sync(mask, u);
    int pred;
    o[8] = __match_any_sync(mask, s % 4) ^ (__match_all_sync(mask, 7, &pred) + pred);
}

template <int N>
static void big_tiles(int block) {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, block * kFields * sizeof(int)));
    big_tile_kernel<N><<<2, block>>>(d);
    std::vector<int> h(block * kFields);
    CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int r = 0; r < block; r++) {
        int first = r / N * N, sum = 0, mx = 0, inc = 0, exc = 0, any96 = 0, all = 1;
        for (int t = first; t < first + N; t++) {
            int v = input_of(t);
            sum += v;
            mx = v > mx ? v : mx;
            if (t <= r) inc += v;
            if (t < r) exc += v;
            any96 |= v == 96;
            all &= v < 97;
        }
        const int* o = &h[r * kFields];
        int want[kFields] = {r % N,
                             N,
                             (r / N) * 100 + (block + N - 1) / N,
                             input_of(first + N - 1),
                             any96 * 10 + all,
                             sum,
                             mx,
                             inc,
                             exc,
                             input_of(first + (r % N + 1) % N)};
        for (int f = 0; f < kFields; f++) wrong += o[f] != want[f];
    }
    char what[96];
    snprintf(what, sizeof what, "thread_block_tile<%d> in blocks of %d", N, block);
    expect(wrong == 0, what, std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(d));
}

// Each block sums `chunks` chunks of `chunk` ints staged through two shared buffers; each tile
// of 32 also copies its own 37-int slice and sums it. out[block] = block sum, out[grid + t] =
// sum of tile t's slice.
__global__ void memcpy_async_kernel(const int* in, int* out, int chunk, int chunks) {
    extern __shared__ int stage[];  // 2 * chunk ints, then 37 ints per tile
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    const int* src = in + (size_t)blockIdx.x * chunk * chunks;
    cg::memcpy_async(block, stage, src, sizeof(int) * chunk);
    int sum = 0;
    for (int c = 0; c < chunks; c++) {
        if (c + 1 < chunks) {
            cg::memcpy_async(block, stage + (c + 1) % 2 * chunk, src + (size_t)(c + 1) * chunk,
                             sizeof(int) * chunk);
            cg::wait_prior<1>(block);
        } else {
            cg::wait(block);
        }
        for (int i = block.thread_rank(); i < chunk; i += block.size())
            sum += stage[c % 2 * chunk + i];
        block.sync();  // the buffer is refilled next iteration
    }
    atomicAdd(&out[blockIdx.x], sum);
    int* mine = stage + 2 * chunk + tile.meta_group_rank() * 37;
    int t = blockIdx.x * tile.meta_group_size() + tile.meta_group_rank();
    cg::memcpy_async(tile, mine, in + (size_t)t * 37, sizeof(int) * 37);
    cg::wait(tile);
    int v = tile.thread_rank() < 5 ? mine[32 + tile.thread_rank()] : 0;
    v += mine[tile.thread_rank()];
    v = cg::reduce(tile, v, cg::plus<int>());
    if (tile.thread_rank() == 0) out[gridDim.x + t] = v;
}

static void memcpy_async_copies() {
    const int blocks = 3, threads = 96, chunk = 250, chunks = 5;  // 1000-byte chunks
    const int n = blocks * chunk * chunks, tiles = blocks * threads / 32;
    std::vector<int> h(n), out(blocks + tiles);
    for (int i = 0; i < n; i++) h[i] = input_of(i);
    int *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_out, 0, out.size() * sizeof(int)));
    size_t smem = (2 * chunk + threads / 32 * 37) * sizeof(int);
    memcpy_async_kernel<<<blocks, threads, smem>>>(d_in, d_out, chunk, chunks);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int b = 0; b < blocks; b++) {
        int want = 0;
        for (int i = b * chunk * chunks; i < (b + 1) * chunk * chunks; i++) want += h[i];
        wrong += out[b] != want;
    }
    for (int t = 0; t < tiles; t++) {
        int want = 0;
        for (int i = t * 37; i < t * 37 + 37; i++) want += h[i];
        wrong += out[blocks + t] != want;
    }
    expect(wrong == 0, "cg::memcpy_async by a block (double-buffered) and by tiles",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
}

static void thread_group_function() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 512 * sizeof(int)));
    thread_group_kernel<<<1, 512>>>(d);
    std::vector<int> h(512);
    CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int tile = 0; tile < 4; tile++) {
        int sum = 0;
        for (int t = tile * 128; t < tile * 128 + 128; t++) sum += input_of(t);
        wrong += h[tile * 128] != sum;
    }
    expect(wrong == 0, "a 128-thread thread_group through a function taking thread_group",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(d));
}

static void partitions() {
    const int n = 64;
    int* d;
    CUDA_CHECK(cudaMalloc(&d, n * 6 * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, n * 6 * sizeof(int)));
    partition_kernel<<<1, n>>>(d);
    std::vector<int> h(n * 6);
    CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int r = 0; r < n; r++) {
        int base = r / 32 * 32, v = input_of(r);
        int size = 0, rank = 0, sum = 0, ballot = 0, brank = 0, match = 0;
        for (int t = base; t < base + 32; t++) {
            int w = input_of(t);
            if (w % 3 == v % 3) {
                if (t < r) rank++;
                size++;
                sum += w;
            }
            if (w % 2 == v % 2) {
                if (w > 50) ballot |= 1 << brank;
                brank++;
            }
            if (w % 5 == v % 5) match |= 1 << (t - base);
        }
        const int* o = &h[r * 6];
        wrong += o[0] != size * 100 + rank;
        wrong += o[1] != sum;
        wrong += o[2] != ballot;
        wrong += o[5] != match;
        if (r % 4 != 3) {
            // The active lanes are those with lane % 4 != 3: 24 per warp; quads of 4 ranks.
            int active_rank = (r - base) / 4 * 3 + (r - base) % 4, quad = active_rank / 4;
            int qsum = 0;
            for (int t = base; t < base + 32; t++) {
                int ar = (t - base) / 4 * 3 + (t - base) % 4;
                if ((t - base) % 4 != 3 && ar / 4 == quad) qsum += input_of(t);
            }
            wrong += o[3] != 4 * 100 + (active_rank % 4) * 10 + quad;
            wrong += o[4] != qsum;
        }
    }
    expect(wrong == 0, "labeled_partition, binary_partition, tiled_partition(coalesced, 4)",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(d));
}

static void warp_reductions() {
    for (unsigned mask : {0xffffffffu, 0x0f0f00f3u}) {
        unsigned* d;
        CUDA_CHECK(cudaMalloc(&d, 32 * 9 * sizeof(unsigned)));
        warp_reduce_kernel<<<1, 32>>>(d, mask);
        std::vector<unsigned> h(32 * 9);
        CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
        unsigned add = 0, umin = ~0u, umax = 0, band = ~0u, bor = 0, bxor = 0;
        int sadd = 0, smin = 1 << 30, smax = -(1 << 30);
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            unsigned u = (unsigned)input_of(l) * 40503u;
            int s = input_of(l) - 48;
            add += u;
            umin = u < umin ? u : umin;
            umax = u > umax ? u : umax;
            band &= u;
            bor |= u;
            bxor ^= u;
            sadd += s;
            smin = s < smin ? s : smin;
            smax = s > smax ? s : smax;
        }
        int wrong = 0;
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            unsigned same = 0;
            for (int k = 0; k < 32; k++)
                if ((mask >> k & 1u) && (input_of(k) - 48) % 4 == (input_of(l) - 48) % 4)
                    same |= 1u << k;
            const unsigned* o = &h[l * 9];
            unsigned want[9] = {add,
                                umin,
                                umax,
                                (unsigned)sadd,
                                (unsigned)smin,
                                (unsigned)smax,
                                band ^ (bor << 1),
                                bxor,
                                same ^ (mask + 1)};
            for (int f = 0; f < 9; f++) wrong += o[f] != want[f];
        }
        char what[96];
        snprintf(what, sizeof what, "__reduce_*_sync and __match_*_sync with mask 0x%08x", mask);
        expect(wrong == 0, what, std::to_string(wrong) + " wrong");
        CUDA_CHECK(cudaFree(d));
    }
}

int main() {
    big_tiles<64>(256);
    big_tiles<128>(384);
    big_tiles<256>(512);
    big_tiles<512>(1024);
    big_tiles<1024>(1024);
    thread_group_function();
    partitions();
    warp_reductions();
    memcpy_async_copies();
    return test_report("tile");
}
