// Inline PTX cp.async (PTX ISA, "Data Movement and Conversion Instructions: cp.async",
// "cp.async.commit_group", "cp.async.wait_group / cp.async.wait_all"): .ca with 4, 8 and 16
// bytes, .cg with 16, the src-size form (the bytes past src-size are zeros), the ignore-src
// form with a predicate set by setp inside a { } scope, the .L2::128B prefetch hint, 32-bit
// ("r") and 64-bit ("l") shared addresses, and the groups: after wait_group N every group but
// the N most recent is complete, after wait_all everything is; wait_group takes a literal or an
// "n" operand. Under the CPU runtime a copy lands exactly when its thread waits for it (the
// latest moment the ISA allows), which is checked too: a read before the wait sees the old bytes.
//! run: ./prog => pass /all ptx_cp_async checks passed/
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "test_util.h"

// Each thread owns a 64-byte slot of shared memory and copies into it from its 64-byte slot of
// src: [0, 4) .ca 4; [4, 8) stays untouched; [8, 16) .ca 8 with src-size 3; [16, 32) .cg 16
// with src-size = thread % 17 (clamped to 16); [32, 48) .ca 16 .L2::128B; [48, 64) .cg 16
// ignored when the thread is odd (zeros).
constexpr int kSlot = 64;
constexpr int kThreads = 64;

__device__ void copies(uint32_t dst, const unsigned char* src, int t) {
    const uint64_t dst64 = dst;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
    asm volatile("cp.async.ca.shared::cta.global [%0], [%1], 8, 3;" ::"l"(dst64 + 8), "l"(src + 8)
                 : "memory");
    const int n = t % 17 < 16 ? t % 17 : 16;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + 16), "l"(src + 16),
                 "r"(n)
                 : "memory");
    asm volatile("cp.async.ca.shared.global.L2::128B [%0 + 32], [%1 + 32], 16;" ::"r"(dst), "l"(src)
                 : "memory");
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  setp.ne.b32 p, %2, 0;  // ignore the source when the thread is odd\n"
        "  cp.async.cg.shared.global [%0], [%1], 16, p;\n"
        "}\n" ::"r"(dst + 48),
        "l"(src + 48), "r"(t & 1)
        : "memory");
}

__global__ void copy_kernel(const unsigned char* src, unsigned char* out) {
    __shared__ __align__(16) unsigned char slots[kThreads * kSlot];
    const int t = threadIdx.x;
    for (int i = 0; i < kSlot; i++) slots[t * kSlot + i] = 0xee;  // "untouched"
    copies((uint32_t)__cvta_generic_to_shared(slots + t * kSlot), src + t * kSlot, t);
    asm volatile("cp.async.wait_all;" ::: "memory");
    for (int i = 0; i < kSlot; i++) out[t * kSlot + i] = slots[t * kSlot + i];
}

// Groups: group 1 copies 16 bytes to a, group 2 to b, group 3 to c (from dynamic shared memory's
// point of view: extern __shared__). seen[t][0..2] = a, b, c after wait_group 2, 1, 0 as the
// thread sees them; early[t] = a's first byte before any wait.
__global__ void group_kernel(const unsigned char* src, unsigned char* seen, unsigned char* early) {
    extern __shared__ __align__(16) unsigned char dyn[];
    const int t = threadIdx.x;
    unsigned char* a = dyn + t * 48;
    for (int i = 0; i < 48; i++) a[i] = 0;
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(a);
    for (int g = 0; g < 3; g++) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s + 16 * g),
                     "l"(src + t * 48 + 16 * g)
                     : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    early[t] = a[0];
    asm volatile("cp.async.wait_group 2;" ::: "memory");
    seen[t * 3 + 0] = a[0];
    asm volatile("cp.async.wait_group %0;" ::"n"(1) : "memory");
    seen[t * 3 + 1] = a[16];
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    seen[t * 3 + 2] = a[32];
}

int main() {
    std::vector<unsigned char> src(kThreads * kSlot);
    for (size_t i = 0; i < src.size(); i++) src[i] = (unsigned char)(i * 7 + 1) | 1;  // never 0
    unsigned char *d_src, *d_out, *d_seen, *d_early;
    CUDA_CHECK(cudaMalloc(&d_src, src.size()));
    CUDA_CHECK(cudaMalloc(&d_out, src.size()));
    CUDA_CHECK(cudaMalloc(&d_seen, kThreads * 3));
    CUDA_CHECK(cudaMalloc(&d_early, kThreads));
    CUDA_CHECK(cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice));

    copy_kernel<<<1, kThreads>>>(d_src, d_out);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> out(src.size());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
    const char* const parts[] = {".ca 4 bytes",
                                 "bytes no copy writes",
                                 ".ca 8 bytes, src-size 3",
                                 ".cg 16 bytes, src-size thread % 17",
                                 ".ca 16 bytes .L2::128B",
                                 ".cg 16 bytes, ignore-src on odd threads"};
    const int starts[] = {0, 4, 8, 16, 32, 48}, ends[] = {4, 8, 16, 32, 48, 64};
    for (int p = 0; p < 6; p++) {
        int bad = 0;
        for (int t = 0; t < kThreads; t++)
            for (int i = starts[p]; i < ends[p]; i++) {
                const int n = t % 17 < 16 ? t % 17 : 16;
                const unsigned char s = src[t * kSlot + i];
                unsigned char want = s;
                if (p == 1) want = 0xee;                // not written
                if (p == 2) want = i < 11 ? s : 0;      // 3 bytes copied, 5 zeros
                if (p == 3) want = i - 16 < n ? s : 0;  // src-size n
                if (p == 5) want = t & 1 ? 0 : s;       // ignored source: zeros
                bad += out[t * kSlot + i] != want;
            }
        expect(bad == 0, (std::string("cp.async ") + parts[p]).c_str(),
               bad ? std::to_string(bad) + " bytes wrong" : "");
    }

    group_kernel<<<1, kThreads, kThreads * 48>>>(d_src, d_seen, d_early);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> seen(kThreads * 3), early(kThreads);
    CUDA_CHECK(cudaMemcpy(seen.data(), d_seen, seen.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(early.data(), d_early, early.size(), cudaMemcpyDeviceToHost));
    for (int g = 0; g < 3; g++) {
        int bad = 0;
        for (int t = 0; t < kThreads; t++) bad += seen[t * 3 + g] != src[t * 48 + 16 * g];
        char what[128];
        snprintf(what, sizeof what, "cp.async group %d complete after wait_group %d", g + 1, 2 - g);
        expect(bad == 0, what, bad ? std::to_string(bad) + " threads saw old bytes" : "");
    }
#ifdef __CUCC__
    int landed = 0;
    for (int t = 0; t < kThreads; t++) landed += early[t] != 0;
    expect(landed == 0, "CPU runtime: no copy lands before its thread waits",
           std::to_string(landed) + " threads saw copied bytes early");
#endif
    CUDA_CHECK(cudaFree(d_src));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_seen));
    CUDA_CHECK(cudaFree(d_early));
    return test_report("ptx_cp_async");
}
