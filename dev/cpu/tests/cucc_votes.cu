// Warp votes: __ballot_sync, __any_sync, __all_sync, __activemask, __match_any_sync and
// __reduce_add_sync, on full warps, on a partial last warp (a block of 72 threads has a warp
// of 8 lanes) and with masks naming some lanes only. Each thread's predicate comes from a
// table, and the host computes the expected vote from the same table.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

struct Votes {
    unsigned ballot, active, match, odd_lanes_ballot;
    int any, all, sum;
};

// pred and key are per-thread inputs; every lane of the warp takes part in every vote, except
// the odd-lane ballot, which only odd lanes call (with a mask of the odd lanes that exist).
__global__ void vote_kernel(const int* pred, const int* key, Votes* out) {
    int t = threadIdx.x;
    unsigned full = __activemask();
    Votes v;
    v.active = full;
    v.ballot = __ballot_sync(full, pred[t]);
    v.any = __any_sync(full, pred[t]);
    v.all = __all_sync(full, pred[t]);
    v.match = __match_any_sync(full, key[t]);
    v.sum = __reduce_add_sync(full, key[t]);
    v.odd_lanes_ballot = 0;
    if (t % 2 == 1) v.odd_lanes_ballot = __ballot_sync(full & 0xaaaaaaaau, pred[t]);
    out[t] = v;
}

int main() {
    const int n = 72;  // warps of 32, 32 and 8 lanes
    std::vector<int> pred(n), key(n);
    srand(3);
    for (int t = 0; t < n; t++) {
        pred[t] = rand() % 3 == 0;
        key[t] = rand() % 4;
    }
    for (int t = 32; t < 64; t++) pred[t] = 1;  // the second warp votes all-true
    int *d_pred, *d_key;
    Votes* d_out;
    CUDA_CHECK(cudaMalloc(&d_pred, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_key, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(Votes)));
    CUDA_CHECK(cudaMemcpy(d_pred, pred.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_key, key.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    vote_kernel<<<1, n>>>(d_pred, d_key, d_out);
    CUDA_CHECK(cudaGetLastError());
    std::vector<Votes> got(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(Votes), cudaMemcpyDeviceToHost));

    int failures = 0;
    for (int t = 0; t < n; t++) {
        int base = t / 32 * 32, lanes = n - base < 32 ? n - base : 32;
        unsigned active = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        unsigned ballot = 0, match = 0, odd = 0;
        int sum = 0;
        for (int l = 0; l < lanes; l++) {
            ballot |= (unsigned)pred[base + l] << l;
            if (key[base + l] == key[t]) match |= 1u << l;
            if (l % 2 == 1) odd |= (unsigned)pred[base + l] << l;
            sum += key[base + l];
        }
        if (t % 2 == 0) odd = 0;
        const Votes& g = got[t];
        if (g.active != active || g.ballot != ballot || g.any != (ballot != 0) ||
            g.all != (ballot == active) || g.match != match || g.sum != sum ||
            g.odd_lanes_ballot != odd) {
            printf(
                "thread %d: active %08x ballot %08x any %d all %d match %08x sum %d odd %08x; "
                "want %08x %08x %d %d %08x %d %08x\n",
                t, g.active, g.ballot, g.any, g.all, g.match, g.sum, g.odd_lanes_ballot, active,
                ballot, ballot != 0, ballot == active, match, sum, odd);
            failures++;
        }
    }
    if (got[40].all != 1) {
        printf("the all-true warp did not vote all-true\n");
        failures++;
    }
    CUDA_CHECK(cudaFree(d_pred));
    CUDA_CHECK(cudaFree(d_key));
    CUDA_CHECK(cudaFree(d_out));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
