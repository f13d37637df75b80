// Atomics under contention: many blocks (run on several OS threads with CUCC_THREADS=2) update
// the same few words with every atomic CUDA offers, and the host computes what the updates add
// up to. Values are small integers, so even float, double, __half and bf16 sums are exact
// whatever order the additions happen in; a lost update shows as a wrong total. The block- and
// system-scoped forms (atomicAdd_block, atomicCAS_system, ...) run the integer updates again,
// odd threads with _system and even threads with _block, and must give the same totals.
//! run: ./prog => pass
//! run: CUCC_THREADS=2 ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "test_util.h"

struct Counters {
    int add_i, sub_i, max_i, min_i, exch_count;
    unsigned add_u, sub_u, max_u, min_u, and_u, or_u, xor_u, inc_u, dec_u, cas_u;
    unsigned long long add_ull, max_ull, min_ull, cas_ull;
    float add_f, exch_f;
    double add_d;
    __nv_bfloat16 add_bf16;
    __nv_bfloat162 add_bf162;
    __half add_h;
    __half2 add_h2;
};

// Every thread of the grid makes one update of each kind; v is a per-thread value.
__global__ void atomics_kernel(Counters* c, const int* values) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = values[t];
    atomicAdd(&c->add_i, v);
    atomicSub(&c->sub_i, v);
    atomicMax(&c->max_i, v - 500);
    atomicMin(&c->min_i, v - 500);
    atomicAdd(&c->add_u, (unsigned)v);
    atomicSub(&c->sub_u, (unsigned)v);
    atomicMax(&c->max_u, (unsigned)v);
    atomicMin(&c->min_u, (unsigned)v);
    atomicAnd(&c->and_u, ~(1u << (t % 32)) | (v & 1u));
    atomicOr(&c->or_u, 1u << (v % 32));
    atomicXor(&c->xor_u, (unsigned)v);
    atomicInc(&c->inc_u, 100u);
    atomicDec(&c->dec_u, 100u);
    atomicAdd(&c->add_ull, (unsigned long long)v << 20);
    atomicMax(&c->max_ull, (unsigned long long)v << 33);
    atomicMin(&c->min_ull, (unsigned long long)v << 33);
    atomicAdd(&c->add_f, (float)(v % 8));
    atomicAdd(&c->add_d, (double)v);
    atomicAdd(&c->add_bf16, __float2bfloat16(1.0f));
    atomicAdd(&c->add_bf162, __floats2bfloat162_rn(1.0f, 2.0f));
    atomicAdd(&c->add_h, __float2half(1.0f));
    atomicAdd(&c->add_h2, __floats2half2_rn(2.0f, 1.0f));
    // An increment built from compare-and-swap, retried until no other thread intervened.
    unsigned old = c->cas_u, seen;
    while ((seen = atomicCAS(&c->cas_u, old, old + 3u)) != old) old = seen;
    unsigned long long old64 = c->cas_ull, seen64;
    while ((seen64 = atomicCAS(&c->cas_ull, old64, old64 + 5ull)) != old64) old64 = seen64;
    // atomicExch hands a token around: each thread swaps in its own value and counts 1 if it
    // got back a value some thread put there (all start at 0 and every value is > 0).
    float prev = atomicExch(&c->exch_f, (float)v);
    atomicAdd(&c->exch_count, prev > 0.0f ? 1 : 0);
}

// The integer updates of atomics_kernel through the scoped forms (suffix S).
#define SCOPED_UPDATES(S)                                                                        \
    atomicAdd##S(&c->add_i, v);                                                                  \
    atomicSub##S(&c->sub_i, v);                                                                  \
    atomicMax##S(&c->max_i, v - 500);                                                            \
    atomicMin##S(&c->min_i, v - 500);                                                            \
    atomicAnd##S(&c->and_u, ~(1u << (t % 32)) | (v & 1u));                                       \
    atomicOr##S(&c->or_u, 1u << (v % 32));                                                       \
    atomicXor##S(&c->xor_u, (unsigned)v);                                                        \
    atomicInc##S(&c->inc_u, 100u);                                                               \
    atomicDec##S(&c->dec_u, 100u);                                                               \
    atomicAdd##S(&c->add_d, (double)v);                                                          \
    for (unsigned old = c->cas_u, seen; (seen = atomicCAS##S(&c->cas_u, old, old + 3u)) != old;) \
        old = seen;                                                                              \
    atomicAdd##S(&c->exch_count, atomicExch##S(&c->exch_f, (float)v) > 0.0f ? 1 : 0);

__global__ void scoped_atomics_kernel(Counters* c, const int* values) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = values[t];
    if (t % 2) {
        SCOPED_UPDATES(_system)
    } else {
        SCOPED_UPDATES(_block)
    }
}

int main() {
    const int blocks = 64, threads = 128, n = blocks * threads;
    std::vector<int> values(n);
    srand(11);
    for (int& v : values) v = 1 + rand() % 1000;

    Counters init;
    memset(&init, 0, sizeof(init));
    init.max_i = -1000000;
    init.min_i = 1000000;
    init.min_u = 0xffffffffu;
    init.min_ull = ~0ull;
    init.and_u = 0xffffffffu;
    init.sub_u = 0xffffffffu;
    init.dec_u = 50;
    init.add_bf16 = __float2bfloat16(0.0f);
    init.add_bf162 = __floats2bfloat162_rn(0.0f, 0.0f);
    init.add_h = __float2half(0.0f);
    init.add_h2 = __floats2half2_rn(0.0f, 0.0f);

    // The bf16 and half sums must stay exact: at most 256 additions of 1 (bf16 has 8
    // significant bits), so these run on a small grid of their own below.
    Counters want = init;
    for (int t = 0; t < n; t++) {
        int v = values[t];
        want.add_i += v;
        want.sub_i -= v;
        want.max_i = v - 500 > want.max_i ? v - 500 : want.max_i;
        want.min_i = v - 500 < want.min_i ? v - 500 : want.min_i;
        want.add_u += v;
        want.sub_u -= v;
        want.max_u = (unsigned)v > want.max_u ? v : want.max_u;
        want.min_u = (unsigned)v < want.min_u ? v : want.min_u;
        want.and_u &= ~(1u << (t % 32)) | (v & 1u);
        want.or_u |= 1u << (v % 32);
        want.xor_u ^= v;
        want.add_ull += (unsigned long long)v << 20;
        want.max_ull = ((unsigned long long)v << 33) > want.max_ull ? (unsigned long long)v << 33
                                                                    : want.max_ull;
        want.min_ull = ((unsigned long long)v << 33) < want.min_ull ? (unsigned long long)v << 33
                                                                    : want.min_ull;
        want.add_f += (float)(v % 8);
        want.add_d += v;
        want.cas_u += 3;
        want.cas_ull += 5;
    }
    // Increments wrap to 0 after reaching 100; decrements wrap from 0 (or above 100) to 100.
    // Both results depend only on the number of updates, not their order.
    want.inc_u = n % 101;
    want.dec_u = (unsigned)((50 - n % 101 + 101) % 101);
    want.exch_count = n - 1;

    Counters* d_c;
    int* d_values;
    CUDA_CHECK(cudaMalloc(&d_c, sizeof(Counters)));
    CUDA_CHECK(cudaMalloc(&d_values, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_values, values.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_c, &init, sizeof(init), cudaMemcpyHostToDevice));
    atomics_kernel<<<blocks, threads>>>(d_c, d_values);
    CUDA_CHECK(cudaGetLastError());
    Counters got;
    CUDA_CHECK(cudaMemcpy(&got, d_c, sizeof(got), cudaMemcpyDeviceToHost));

    int failures = 0;
    auto check = [&](const char* what, double g, double w) {
        if (g != w) {
            printf("%-10s got %.17g, want %.17g\n", what, g, w);
            failures++;
        }
    };
    check("add int", got.add_i, want.add_i);
    check("sub int", got.sub_i, want.sub_i);
    check("max int", got.max_i, want.max_i);
    check("min int", got.min_i, want.min_i);
    check("add uint", got.add_u, want.add_u);
    check("sub uint", got.sub_u, want.sub_u);
    check("max uint", got.max_u, want.max_u);
    check("min uint", got.min_u, want.min_u);
    check("and", got.and_u, want.and_u);
    check("or", got.or_u, want.or_u);
    check("xor", got.xor_u, want.xor_u);
    check("inc", got.inc_u, want.inc_u);
    check("dec", got.dec_u, want.dec_u);
    check("add ull", (double)got.add_ull, (double)want.add_ull);
    check("max ull", (double)got.max_ull, (double)want.max_ull);
    check("min ull", (double)got.min_ull, (double)want.min_ull);
    check("cas uint", got.cas_u, want.cas_u);
    check("cas ull", (double)got.cas_ull, (double)want.cas_ull);
    check("add float", got.add_f, want.add_f);
    check("add double", got.add_d, want.add_d);
    check("exch", got.exch_count, want.exch_count);

    CUDA_CHECK(cudaMemcpy(d_c, &init, sizeof(init), cudaMemcpyHostToDevice));
    scoped_atomics_kernel<<<blocks, threads>>>(d_c, d_values);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(&got, d_c, sizeof(got), cudaMemcpyDeviceToHost));
    check("scoped add int", got.add_i, want.add_i);
    check("scoped sub int", got.sub_i, want.sub_i);
    check("scoped max int", got.max_i, want.max_i);
    check("scoped min int", got.min_i, want.min_i);
    check("scoped and", got.and_u, want.and_u);
    check("scoped or", got.or_u, want.or_u);
    check("scoped xor", got.xor_u, want.xor_u);
    check("scoped inc", got.inc_u, want.inc_u);
    check("scoped dec", got.dec_u, want.dec_u);
    check("scoped add double", got.add_d, want.add_d);
    check("scoped cas", got.cas_u, want.cas_u);
    check("scoped exch", got.exch_count, want.exch_count);

    // 16-bit float sums: 2 blocks x 100 threads, each adding 1 (bf16 pair: 1 and 2; half
    // pair: 2 and 1), all exactly representable up to 200 and 400.
    CUDA_CHECK(cudaMemcpy(d_c, &init, sizeof(init), cudaMemcpyHostToDevice));
    atomics_kernel<<<2, 100>>>(d_c, d_values);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(&got, d_c, sizeof(got), cudaMemcpyDeviceToHost));
    check("add bf16", __bfloat162float(got.add_bf16), 200.0);
    check("add bf162.x", __bfloat162float(got.add_bf162.x), 200.0);
    check("add bf162.y", __bfloat162float(got.add_bf162.y), 400.0);
    check("add half", __half2float(got.add_h), 200.0);
    check("add half2.x", __half2float(got.add_h2.x), 400.0);
    check("add half2.y", __half2float(got.add_h2.y), 200.0);

    CUDA_CHECK(cudaFree(d_c));
    CUDA_CHECK(cudaFree(d_values));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
