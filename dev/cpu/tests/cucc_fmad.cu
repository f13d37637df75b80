// Fused multiply-adds, as nvcc's --fmad says: cucc compiles for the build machine's processor
// (-march=native, or CUCC_MARCH) and, like nvcc by default, fuses a * b + c into one rounding
// where the processor has FMA; --fmad=false keeps the two roundings. The kernel computes
// a * b + c with a = b = 1 + 2^-12 and c = -(1 + 2^-11): a * b = 1 + 2^-11 + 2^-24 exactly,
// which rounds (a tie, to even) to 1 + 2^-11, so the unfused result is 0 and the fused one
// 2^-24. The inputs come from memory, so nothing is folded at compile time.
//   ./prog: fused exactly when the target has FMA (__FMA__, which the preprocessor must see as
//     the compiler does: the code a program selects by it is the code compiled);
//   built with --fmad=false (-DEXPECT_UNFUSED): never fused;
//   built with CUCC_MARCH=x86-64 (no FMA in that target): not fused, __FMA__ undefined.
//! cpu-only
//! run: ./prog => pass /all cucc_fmad checks passed/
//! run: d=$(mktemp -d) && dev/cpu/cucc --fmad=false -DEXPECT_UNFUSED dev/cpu/tests/cucc_fmad.cu -o $d/p && $d/p; r=$?; rm -rf $d; exit $r => pass /expected unfused[\s\S]*all cucc_fmad checks passed/
//! run: [ "$(uname -m)" = x86_64 ] || { echo "not x86-64: all cucc_fmad checks passed"; exit 0; }; d=$(mktemp -d) && CUCC_MARCH=x86-64 dev/cpu/cucc dev/cpu/tests/cucc_fmad.cu -o $d/p && $d/p; r=$?; rm -rf $d; exit $r => pass /(target has FMA: no|not x86-64)[\s\S]*all cucc_fmad checks passed/
#include <cstdio>
#include "test_util.h"

__global__ void multiply_add(float* out, const float* in) {
    out[threadIdx.x] = in[0] * in[1] + in[2];
}

int main() {
    float* buf;
    CUDA_CHECK(cudaMallocManaged(&buf, 8 * sizeof(float)));
    buf[0] = buf[1] = 1.0f + 1.0f / 4096;    // 1 + 2^-12
    buf[2] = -(1.0f + 1.0f / 2048);          // -(1 + 2^-11)
    multiply_add<<<1, 4>>>(buf + 4, buf);
    CUDA_CHECK(cudaDeviceSynchronize());
#ifdef __FMA__
    const bool target_fma = true;
#else
    const bool target_fma = false;
#endif
#ifdef EXPECT_UNFUSED
    const bool want_fused = false;
    printf("built with --fmad=false: expected unfused\n");
#else
    const bool want_fused = target_fma;
#endif
    printf("target has FMA: %s\n", target_fma ? "yes" : "no");
    const float fused = 1.0f / (1 << 24), unfused = 0.0f;
    char detail[96];
    snprintf(detail, sizeof detail, "got %a, fused %a, unfused %a", buf[4], fused, unfused);
    expect(buf[4] == (want_fused ? fused : unfused),
           want_fused ? "a * b + c fused (one rounding)" : "a * b + c not fused (two roundings)",
           detail);
    return test_report("cucc_fmad");
}
