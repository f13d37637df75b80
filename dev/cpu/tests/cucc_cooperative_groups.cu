// Cooperative groups: this_thread_block() on a 3-D block, tiled_partition<N> for every tile
// size 1..32 and tiled_partition(block, n), with thread_rank, size, num_threads,
// meta_group_rank, meta_group_size, sync, shfl, shfl_xor, shfl_down, shfl_up, any, all,
// ballot, cg::reduce with plus/less/greater/bit_and/bit_or/bit_xor, cg::inclusive_scan, and a
// shuffle of a struct.
// The host computes every expected value from the thread's linear rank.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include "test_util.h"

namespace cg = cooperative_groups;

const int kFields = 16;

// Input of the thread with linear rank r.
__host__ __device__ int input_of(int r) { return (r * 37 + 11) % 101; }

// Each thread writes kFields numbers about its block and its tile.
template <int N>
__global__ void tile_kernel(int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
    int r = block.thread_rank();
    int v = input_of(r);
    int* o = out + (size_t)r * kFields;
    o[0] = r;
    o[1] = block.size();
    o[2] = tile.thread_rank();
    o[3] = tile.size() * 1000 + tile.num_threads();
    o[4] = tile.meta_group_rank();
    o[5] = tile.meta_group_size();
    o[6] = tile.shfl(v, N - 1);
    o[7] = tile.shfl_xor(v, N / 2);
    o[8] = tile.shfl_down(v, 1);
    o[9] = tile.shfl_up(v, 1);
    o[10] = cg::reduce(tile, v, cg::plus<int>());
    o[11] = cg::reduce(tile, v, cg::less<int>()) * 1000 + cg::reduce(tile, v, cg::greater<int>());
    o[12] = cg::reduce(tile, v, cg::bit_xor<int>()) ^ (cg::reduce(tile, v, cg::bit_or<int>()) << 8) ^
            (cg::reduce(tile, v, cg::bit_and<int>()) << 16);
    o[13] = tile.any(v > 90) * 100 + tile.all(v > 5) * 10;
    o[14] = (int)tile.ballot(v % 2);
    o[15] = cg::inclusive_scan(tile, v);
    tile.sync();
    block.sync();
}

// The same thread_group operations through tiled_partition(block, n) with n chosen at run time.
__global__ void dynamic_tile_kernel(int* out, unsigned n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_group tile = cg::tiled_partition(block, n);
    int r = block.thread_rank();
    out[r * 3 + 0] = tile.thread_rank();
    out[r * 3 + 1] = tile.size();
    tile.sync();
    // block-level sum through shared memory, with group syncs between the phases
    __shared__ int total;
    if (r == 0) total = 0;
    block.sync();
    atomicAdd(&total, input_of(r));
    cg::sync(block);
    out[r * 3 + 2] = total;
}

// A tile shuffles any trivially copyable type: a 12-byte struct moved one rank down.
struct Triple {
    int a;
    float b;
    short c;
};
__global__ void struct_shuffle_kernel(int* out) {
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
    int r = threadIdx.x;
    Triple t = {r, 0.5f * r, (short)(-r)};
    Triple s = tile.shfl_down(t, 1);
    out[r] = (s.a == (int)(2 * s.b) && s.c == -s.a) ? s.a : -1;
}

int failures = 0;

void expect(const char* what, int n, int r, int got, int want) {
    if (got != want) {
        if (failures < 20) printf("tile %d, rank %d, %s: got %d, want %d\n", n, r, what, got, want);
        failures++;
    }
}

template <int N>
void check_tile(int* d_out, std::vector<int>& h) {
    const dim3 block(8, 4, 3);  // 96 threads, 3 warps
    const int threads = 96;
    tile_kernel<N><<<1, block>>>(d_out);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(h.data(), d_out, threads * kFields * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < threads; r++) {
        const int* o = &h[r * kFields];
        int first = r / N * N, lane = r % N;
        auto in = [&](int k) { return input_of(first + k); };
        int sum = 0, lo = 1 << 30, hi = -1, x = 0, orr = 0, andd = ~0, any = 0, all = 1, ballot = 0, scan = 0;
        for (int k = 0; k < N; k++) {
            sum += in(k);
            lo = in(k) < lo ? in(k) : lo;
            hi = in(k) > hi ? in(k) : hi;
            x ^= in(k);
            orr |= in(k);
            andd &= in(k);
            any |= in(k) > 90;
            all &= in(k) > 5;
            ballot |= (in(k) % 2) << k;
            if (k <= lane) scan += in(k);
        }
        expect("block rank", N, r, o[0], r);
        expect("block size", N, r, o[1], threads);
        expect("thread_rank", N, r, o[2], lane);
        expect("size/num_threads", N, r, o[3], N * 1000 + N);
        expect("meta_group_rank", N, r, o[4], r / N);
        expect("meta_group_size", N, r, o[5], threads / N);
        expect("shfl", N, r, o[6], in(N - 1));
        expect("shfl_xor", N, r, o[7], in(lane ^ (N / 2)));
        expect("shfl_down", N, r, o[8], lane + 1 < N ? in(lane + 1) : in(lane));
        expect("shfl_up", N, r, o[9], lane >= 1 ? in(lane - 1) : in(lane));
        expect("reduce plus", N, r, o[10], sum);
        expect("reduce less/greater", N, r, o[11], lo * 1000 + hi);
        expect("reduce bit ops", N, r, o[12], x ^ (orr << 8) ^ (andd << 16));
        expect("any/all", N, r, o[13], any * 100 + all * 10);
        expect("ballot", N, r, o[14], ballot);
        expect("inclusive_scan", N, r, o[15], scan);
    }
}

int main() {
    int* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, 96 * kFields * sizeof(int)));
    std::vector<int> h(96 * kFields);
    check_tile<1>(d_out, h);
    check_tile<2>(d_out, h);
    check_tile<4>(d_out, h);
    check_tile<8>(d_out, h);
    check_tile<16>(d_out, h);
    check_tile<32>(d_out, h);

    const int threads = 128;
    int total = 0;
    for (int r = 0; r < threads; r++) total += input_of(r);
    for (unsigned n : {1u, 2u, 4u, 8u, 16u, 32u}) {
        dynamic_tile_kernel<<<1, threads>>>(d_out, n);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(h.data(), d_out, threads * 3 * sizeof(int), cudaMemcpyDeviceToHost));
        for (int r = 0; r < threads; r++) {
            expect("dynamic thread_rank", n, r, h[r * 3], r % n);
            expect("dynamic size", n, r, h[r * 3 + 1], n);
            expect("block sum", n, r, h[r * 3 + 2], total);
        }
    }
    struct_shuffle_kernel<<<1, 64>>>(d_out);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(h.data(), d_out, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < 64; r++) expect("struct shfl_down", 16, r, h[r], r % 16 < 15 ? r + 1 : r);
    CUDA_CHECK(cudaFree(d_out));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
