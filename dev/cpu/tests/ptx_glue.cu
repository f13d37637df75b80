// The inline PTX around the tensor-core instructions, as public code writes it: { } scopes with
// .reg declarations (also %-named registers, escaped as %%), several instructions in one
// string, // comments, @p and @!p guards from setp (integer and float comparisons, NaN ordered),
// mov with registers, "n" immediates and {lo, hi} vectors, cvta between generic and shared
// addresses, integer cvt, read-write "+r" operands, asm in if/else branches without braces, and
// __cvta_generic_to_shared / __cvta_shared_to_generic. Each result is compared with the same
// computation in C++.
//! run: ./prog => pass /all ptx_glue checks passed/
#include <cmath>
#include <cstdint>
#include <cstdio>
#include "test_util.h"

struct Results {
    uint32_t shared32, shared32_ref;  // cvta.to.shared + cvt.u32.u64 vs __cvta_generic_to_shared
    int generic_ok, intrinsic_ok;     // cvta.shared back to the pointer; the intrinsic pair
    uint32_t lt, lt_ref, ge, ge_ref;  // predicated movs after setp.lt.s32 / setp.hs.u32
    uint32_t fne_nan, fne, feq, fgt;  // setp.ne.f32 with NaN (ordered: false), ne, eq
    uint32_t sum, sum_ref;            // several instructions, %% registers, comments
    uint32_t rw, immediate;
    long long widened;  // cvt.s64.s32
    uint32_t packed;    // mov.b32 {hi, lo} of the halves that mov.b32 {lo, hi} unpacked
    uint32_t branch_a, branch_b;
};

__device__ uint32_t select(bool c) {
    uint32_t r;
    if (c) asm("mov.u32 %0, 11;" : "=r"(r));
    else asm("mov.u32 %0, 22;" : "=r"(r));
    return r;
}

__global__ void glue_kernel(Results* out, int a, int b, float nan, float x) {
    __shared__ __align__(16) float tile[64];
    Results r;
    const float* p = tile + 5;
    asm volatile(
        "{\n"
        "  .reg .u64 a64;\n"
        "  cvta.to.shared.u64 a64, %1;\n"
        "  cvt.u32.u64 %0, a64;\n"
        "}\n"
        : "=r"(r.shared32)
        : "l"(p));
    r.shared32_ref = (uint32_t)__cvta_generic_to_shared(p);
    uint64_t back;
    asm("cvta.shared.u64 %0, %1;" : "=l"(back) : "l"((uint64_t)r.shared32));
    r.generic_ok = (const float*)back == p;
    r.intrinsic_ok = __cvta_shared_to_generic(__cvta_generic_to_shared(p)) == (void*)p;
    asm("{ .reg .pred lt; setp.lt.s32 lt, %1, %2; @lt mov.u32 %0, 1; @!lt mov.u32 %0, 2; }"
        : "=r"(r.lt)
        : "r"(a), "r"(b));
    r.lt_ref = a < b ? 1 : 2;
    asm("{ .reg .pred %%q; setp.hs.u32 %%q, %1, %2; mov.u32 %0, 0; @%%q mov.u32 %0, 7; }"
        : "=r"(r.ge)
        : "r"((unsigned)a), "r"((unsigned)b));
    r.ge_ref = (unsigned)a >= (unsigned)b ? 7 : 0;
    asm("{ .reg .pred n; setp.ne.f32 n, %1, %2; mov.u32 %0, 0; @n mov.u32 %0, 1; }"
        : "=r"(r.fne_nan)
        : "f"(nan), "f"(x));
    asm("{ .reg .pred n; setp.ne.f32 n, %1, %2; mov.u32 %0, 0; @n mov.u32 %0, 1; }"
        : "=r"(r.fne)
        : "f"(x), "f"(x + 1.0f));
    asm("{ .reg .pred e; setp.eq.f32 e, %1, %2; mov.u32 %0, 0; @e mov.u32 %0, 1; }"
        : "=r"(r.feq)
        : "f"(x), "f"(x));
    asm("{ .reg .pred g; setp.gt.f32 g, %1, 0f40000000; mov.u32 %0, 0; @g mov.u32 %0, 1; }"
        : "=r"(r.fgt)
        : "f"(x));
    asm volatile(
        "{ .reg .b32 %%t<2>;        // two scratch registers\n\t"
        "mov.b32 %%t0, %1; mov.b32 %%t1, %2;\n\t"
        "mov.b32 %0, %%t1; }"
        : "=r"(r.sum)
        : "r"(a), "r"(b));
    r.sum_ref = (uint32_t)b;
    r.rw = 5;
    asm("mov.u32 %0, %1;" : "+r"(r.rw) : "r"(r.rw + 1));
    asm("mov.u32 %0, %1;" : "=r"(r.immediate) : "n"(42));
    asm("cvt.s64.s32 %0, %1;" : "=l"(r.widened) : "r"(-a));
    unsigned short lo, hi;
    asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(0x12345678u));
    asm("mov.b32 %0, {%1, %2};" : "=r"(r.packed) : "h"(hi), "h"(lo));
    r.branch_a = select(a < b);
    r.branch_b = select(a > b);
    *out = r;
}

int main() {
    Results* d;
    CUDA_CHECK(cudaMalloc(&d, sizeof(Results)));
    const int a = 3, b = 8;
    glue_kernel<<<1, 1>>>(d, a, b, NAN, 2.5f);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    Results r;
    CUDA_CHECK(cudaMemcpy(&r, d, sizeof r, cudaMemcpyDeviceToHost));
    expect(r.shared32 == r.shared32_ref, "cvta.to.shared.u64 + cvt.u32.u64 in a { .reg } scope");
    expect(r.generic_ok == 1, "cvta.shared.u64 maps the shared address back to the pointer");
    expect(r.intrinsic_ok == 1, "__cvta_shared_to_generic(__cvta_generic_to_shared(p)) == p");
    expect(r.lt == r.lt_ref, "setp.lt.s32 with @p / @!p mov");
    expect(r.ge == r.ge_ref, "setp.hs.u32 with @p mov");
    expect(r.fne_nan == 0, "setp.ne.f32 is false when an operand is NaN");
    expect(r.fne == 1 && r.feq == 1, "setp.ne.f32 / setp.eq.f32");
    expect(r.fgt == 1, "setp.gt.f32 against the literal 0f40000000 (2.0)");
    expect(r.sum == r.sum_ref, "%% registers, several instructions, // comments");
    expect(r.rw == 6, "a \"+r\" operand");
    expect(r.immediate == 42, "an \"n\" immediate");
    expect(r.widened == -a, "cvt.s64.s32 sign-extends");
    expect(r.packed == 0x56781234u, "mov.b32 unpacking to and packing from {b16, b16}");
    expect(r.branch_a == 11 && r.branch_b == 22, "asm as the statement of if and else");
    CUDA_CHECK(cudaFree(d));
    return test_report("ptx_glue");
}
