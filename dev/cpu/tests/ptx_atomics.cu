// Inline PTX atomics (PTX ISA, "Parallel Synchronization and Communication Instructions: atom"
// and "... red"), as public verification code writes them: red.global.add.u64 and the red
// forms with .relaxed/.release and .gpu/.sys, atom.global add/min/max/inc/dec/and/or/xor/exch/cas
// on .u32/.s32/.u64/.s64/.b32/.b64/.f32/.f64 with .acquire/.acq_rel and scopes, atom.shared and
// generic addresses, and the bit bucket `_`. 8 blocks of 256 threads hammer the same words from
// several OS threads; every total is compared with the host's, every returned old value is checked
// for what only an atomic can give (cas/exch/inc hand out each ticket exactly once).
//! run: ./prog => pass /all ptx_atomics checks passed/
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "test_util.h"

constexpr int kBlocks = 8, kThreads = 256, kN = kBlocks * kThreads;

struct Counters {
    unsigned long long red_u64, red_sys_u64, atom_u64;
    unsigned add_u32;
    int min_s32, max_s32;
    long long min_s64;
    unsigned long long max_u64;
    unsigned inc_u32, dec_u32;
    unsigned and_b32, or_b32, xor_b32;
    unsigned long long xor_b64;
    float add_f32;
    double add_f64;
    unsigned cas_ticket, exch_chain;
};

__global__ void atomics_kernel(Counters* c, unsigned* tickets, unsigned* exch_old,
                               unsigned long long* add_old, unsigned* shared_total) {
    __shared__ unsigned block_total;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) block_total = 0;
    __syncthreads();
    const unsigned long long v = (unsigned long long)i * 1000003ull;
    asm volatile("red.global.add.u64 [%0], %1;" ::"l"(&c->red_u64), "l"(v) : "memory");
    asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(&c->red_sys_u64), "l"(v)
                 : "memory");
    asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;"
                 : "=l"(add_old[i])
                 : "l"(&c->atom_u64), "l"(1ull)
                 : "memory");
    asm volatile("atom.global.add.u32 _, [%0], %1;" ::"l"(&c->add_u32), "r"(3u) : "memory");
    asm volatile("atom.global.min.s32 _, [%0], %1;" ::"l"(&c->min_s32), "r"(i - 1000) : "memory");
    asm volatile("red.global.max.s32 [%0], %1;" ::"l"(&c->max_s32), "r"(i - 1000) : "memory");
    asm volatile("red.release.gpu.global.min.s64 [%0], %1;" ::"l"(&c->min_s64),
                 "l"(-(long long)i * 7)
                 : "memory");
    asm volatile("atom.global.max.u64 _, [%0], %1;" ::"l"(&c->max_u64), "l"(v) : "memory");
    asm volatile("atom.global.acquire.sys.inc.u32 _, [%0], %1;" ::"l"(&c->inc_u32), "r"(1000u)
                 : "memory");
    asm volatile("red.global.dec.u32 [%0], %1;" ::"l"(&c->dec_u32), "r"(5000u) : "memory");
    asm volatile("red.global.and.b32 [%0], %1;" ::"l"(&c->and_b32), "r"(~(1u << (i % 32)))
                 : "memory");
    asm volatile("red.global.or.b32 [%0], %1;" ::"l"(&c->or_b32), "r"(1u << (i % 31)) : "memory");
    asm volatile("red.global.xor.b32 [%0], %1;" ::"l"(&c->xor_b32), "r"((unsigned)i) : "memory");
    asm volatile("atom.global.xor.b64 _, [%0], %1;" ::"l"(&c->xor_b64), "l"(v) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(&c->add_f32), "f"(0.5f) : "memory");
    asm volatile("atom.add.f64 _, [%0], %1;" ::"l"(&c->add_f64), "d"(0.25) : "memory");
    // a ticket by compare-and-swap: retry until this thread moved the counter from t to t + 1
    unsigned t = 0, seen;
    for (;;) {
        asm volatile("atom.global.cas.b32 %0, [%1], %2, %3;"
                     : "=r"(seen)
                     : "l"(&c->cas_ticket), "r"(t), "r"(t + 1)
                     : "memory");
        if (seen == t) break;
        t = seen;
    }
    tickets[i] = t;
    // exchange: the old values form a chain through every thread's number
    asm volatile("atom.global.exch.b32 %0, [%1], %2;"
                 : "=r"(exch_old[i])
                 : "l"(&c->exch_chain), "r"((unsigned)i + 1)
                 : "memory");
    // shared memory: .shared with a 32-bit address, and a generic pointer into shared memory
    asm volatile(
        "red.shared.add.u32 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(&block_total)),
        "r"(1u)
        : "memory");
    asm volatile("atom.add.u32 _, [%0], %1;" ::"l"(&block_total), "r"(1u) : "memory");
    __syncthreads();
    if (threadIdx.x == 0) shared_total[blockIdx.x] = block_total;
}

int main() {
    Counters init = {};
    init.min_s32 = 1 << 30;
    init.max_s32 = -(1 << 30);
    init.min_s64 = 0;
    init.and_b32 = 0xffffffffu;
    init.dec_u32 = 0;
    Counters* d_c;
    unsigned *d_tickets, *d_exch, *d_shared;
    unsigned long long* d_add_old;
    CUDA_CHECK(cudaMalloc(&d_add_old, kN * 8));
    CUDA_CHECK(cudaMalloc(&d_c, sizeof(Counters)));
    CUDA_CHECK(cudaMalloc(&d_tickets, kN * 4));
    CUDA_CHECK(cudaMalloc(&d_exch, kN * 4));
    CUDA_CHECK(cudaMalloc(&d_shared, kBlocks * 4));
    CUDA_CHECK(cudaMemcpy(d_c, &init, sizeof init, cudaMemcpyHostToDevice));
    atomics_kernel<<<kBlocks, kThreads>>>(d_c, d_tickets, d_exch, d_add_old, d_shared);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    Counters c;
    std::vector<unsigned> tickets(kN), exch(kN), shared(kBlocks);
    std::vector<unsigned long long> add_old(kN);
    CUDA_CHECK(cudaMemcpy(add_old.data(), d_add_old, kN * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&c, d_c, sizeof c, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(tickets.data(), d_tickets, kN * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(exch.data(), d_exch, kN * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(shared.data(), d_shared, kBlocks * 4, cudaMemcpyDeviceToHost));

    unsigned long long sum_v = 0, max_v = 0, xor_v = 0;
    unsigned xor_i = 0, or_bits = 0, and_bits = 0xffffffffu;
    for (int i = 0; i < kN; i++) {
        const unsigned long long v = (unsigned long long)i * 1000003ull;
        sum_v += v;
        max_v = v > max_v ? v : max_v;
        xor_v ^= v;
        xor_i ^= (unsigned)i;
        or_bits |= 1u << (i % 31);
        and_bits &= ~(1u << (i % 32));
    }
    // inc with limit 1000 counts 0..1000 and wraps: kN increments from 0 end at kN mod 1001;
    // dec with limit 5000 from 0 wraps to 5000 first, then counts down: 5000 - (kN - 1) mod 5001
    const unsigned inc_want = kN % 1001, dec_want = (5001u - (unsigned)(kN % 5001)) % 5001;
    expect(c.red_u64 == sum_v, "red.global.add.u64");
    expect(c.red_sys_u64 == sum_v, "red.relaxed.sys.global.add.u64");
    std::vector<int> add_seen(kN, 0);
    for (unsigned long long o : add_old)
        add_seen[o < (unsigned long long)kN ? o : 0] += o < (unsigned long long)kN ? 1 : 2;
    bool each_once = c.atom_u64 == (unsigned long long)kN;
    for (int k = 0; k < kN; k++) each_once &= add_seen[k] == 1;
    expect(each_once, "atom.acq_rel.gpu.global.add.u64 returns every old value 0..N-1 once");
    expect(c.add_u32 == 3u * kN, "atom.global.add.u32 into the bit bucket _");
    expect(c.min_s32 == -1000, "atom.global.min.s32");
    expect(c.max_s32 == kN - 1 - 1000, "red.global.max.s32");
    expect(c.min_s64 == -(long long)(kN - 1) * 7, "red.release.gpu.global.min.s64");
    expect(c.max_u64 == max_v, "atom.global.max.u64");
    expect(c.inc_u32 == inc_want, "atom.global.acquire.sys.inc.u32 (wraps at the limit)",
           std::to_string(c.inc_u32) + ", want " + std::to_string(inc_want));
    expect(c.dec_u32 == dec_want, "red.global.dec.u32 (wraps to the limit)",
           std::to_string(c.dec_u32) + ", want " + std::to_string(dec_want));
    expect(c.and_b32 == and_bits && c.or_b32 == or_bits && c.xor_b32 == xor_i,
           "red.global.and/or/xor.b32");
    expect(c.xor_b64 == xor_v, "atom.global.xor.b64");
    expect(c.add_f32 == 0.5f * kN, "red.global.add.f32 (exact in this range)");
    expect(c.add_f64 == 0.25 * kN, "atom.add.f64, generic address");
    std::vector<int> seen(kN + 1, 0);
    for (unsigned t : tickets) seen[t < (unsigned)kN ? t : kN]++;
    bool once = c.cas_ticket == (unsigned)kN;
    for (int t = 0; t < kN; t++) once &= seen[t] == 1;
    expect(once, "atom.global.cas.b32 hands out every ticket exactly once");
    // the exchanged old values are 0 and every i + 1 but the last one written: each once
    std::vector<int> old_seen(kN + 1, 0);
    for (unsigned e : exch) old_seen[e <= (unsigned)kN ? e : 0] += e <= (unsigned)kN ? 1 : 1000;
    int twice = 0;
    for (int e = 0; e <= kN; e++) twice += old_seen[e] > 1;
    expect(twice == 0 && old_seen[0] == 1 && old_seen[c.exch_chain] == 0,
           "atom.global.exch.b32 returns each value once");
    bool shared_ok = true;
    for (unsigned s : shared) shared_ok &= s == 2u * kThreads;
    expect(shared_ok, "red.shared.add.u32 and atom.add.u32 on a generic shared pointer");
    CUDA_CHECK(cudaFree(d_c));
    CUDA_CHECK(cudaFree(d_tickets));
    CUDA_CHECK(cudaFree(d_exch));
    CUDA_CHECK(cudaFree(d_shared));
    CUDA_CHECK(cudaFree(d_add_old));
    return test_report("ptx_atomics");
}
