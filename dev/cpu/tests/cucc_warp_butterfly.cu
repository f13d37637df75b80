// cucc's butterfly fusion (dev/cpu/cucc, BUTTERFLY; cucc/device.h, warp_butterfly): a loop over
// the lane offsets 16, 8, 4, 2, 1 whose whole body is `v OP= __shfl_xor_sync(mask, v, o);` or
// `v = fmaxf(v, __shfl_xor_sync(mask, v, o));` becomes one warp exchange, and so does a loop
// whose braced body is several such folds of distinct variables (warp_butterflies: here a float
// sum, a float max and a double sum in one loop). Each fused loop here
// is compared bit for bit with the same reduction written so that cucc leaves it alone (the
// shuffle in a statement of its own: five real shuffles through the runtime's general path), on
// values whose float sum depends on the order of the additions, for
//   - float +=, double +=, unsigned ^= (an `unsigned` loop variable, a mask held in a variable,
//     `o != 0`, `o /= 2`) and fmaxf (in braces, `o >>= 1`);
//   - full warps, a partial last warp (blocks of 48 threads) and lanes that return before the
//     loop (the lanes left take part; the missing ones give the caller its own value).
// The last runs check that cucc fused exactly the loops meant to be fused (the rewritten
// source, kept with --keep-rewritten, names warp_butterfly four times and warp_butterflies
// once) and none of the reference loops, nor a loop that folds one variable twice.
//! cpu-only
//! cucc: --keep-rewritten
//! run: ./prog => pass /all warp butterfly checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=3 ./prog => pass /all warp butterfly checks passed/
//! run: test "$(grep -o '::cucc::warp_butterfly<' ./prog.cucc_warp_butterfly.cu.ii | wc -l)" = 4 => pass
//! run: test "$(grep -o '::cucc::warp_butterflies<::cucc::butterfly_add, ::cucc::butterfly_fmaxf, ::cucc::butterfly_add>(0xffffffffu, psum, pmax, pdsum)' ./prog.cucc_warp_butterfly.cu.ii | wc -l)" = 1 && test "$(grep -o '::cucc::warp_butterflies<' ./prog.cucc_warp_butterfly.cu.ii | wc -l)" = 1 => pass
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "test_util.h"

struct Results {
    float sum;
    double dsum;
    unsigned bits;
    float max;
    float psum, pmax;  // reduced side by side in one loop, with pdsum
    double pdsum;
    float twice;  // one variable folded twice a step: not fused
};

// A value per thread whose sums round differently in different orders.
__host__ __device__ float value_of(int t) {
    return (t % 3 == 0 ? 1.0e7f : 1.0f) * (float)((t * 7919) % 97 - 48) / 7.0f;
}

// Lanes with skip_lane(lane) return before the reductions (none when skip is 0).
__device__ bool skip_lane(int lane, int skip) { return skip && lane % 5 == 3; }

__global__ void fused(Results* out, int skip) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (skip_lane(threadIdx.x % 32, skip)) return;
    float sum = value_of(t);
    double dsum = (double)value_of(t) * 1.0e-3;
    unsigned bits = (unsigned)t * 2654435761u;
    float max = value_of(t + 5);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int offset = 16; offset > 0; offset /= 2)
        dsum += __shfl_xor_sync(0xffffffffu, dsum, offset);
    unsigned full = 0xffffffffu;
    for (unsigned o = 16; o != 0; o /= 2) bits ^= __shfl_xor_sync(full, bits, o);
    for (int o = 16; o > 0; o >>= 1) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
    }
    float psum = value_of(t + 1), pmax = value_of(t + 2), twice = value_of(t + 3);
    double pdsum = (double)value_of(t + 4) * 1.0e-3;
    for (int o = 16; o > 0; o /= 2) {
        psum += __shfl_xor_sync(0xffffffffu, psum, o);
        pmax = fmaxf(pmax, __shfl_xor_sync(0xffffffffu, pmax, o));
        pdsum += __shfl_xor_sync(0xffffffffu, pdsum, o);
    }
    for (int o = 16; o > 0; o /= 2) {
        twice += __shfl_xor_sync(0xffffffffu, twice, o);
        twice += __shfl_xor_sync(0xffffffffu, twice, o);
    }
    out[t] = Results{sum, dsum, bits, max, psum, pmax, pdsum, twice};
}

// The same reductions, each shuffle a statement of its own (not the fused shape).
__global__ void reference(Results* out, int skip) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (skip_lane(threadIdx.x % 32, skip)) return;
    float sum = value_of(t);
    double dsum = (double)value_of(t) * 1.0e-3;
    unsigned bits = (unsigned)t * 2654435761u;
    float max = value_of(t + 5);
    for (int o = 16; o > 0; o /= 2) {
        float other = __shfl_xor_sync(0xffffffffu, sum, o);
        sum += other;
    }
    for (int o = 16; o > 0; o /= 2) {
        double other = __shfl_xor_sync(0xffffffffu, dsum, o);
        dsum += other;
    }
    for (int o = 16; o > 0; o /= 2) {
        unsigned other = __shfl_xor_sync(0xffffffffu, bits, o);
        bits ^= other;
    }
    for (int o = 16; o > 0; o /= 2) {
        float other = __shfl_xor_sync(0xffffffffu, max, o);
        max = fmaxf(max, other);
    }
    float psum = value_of(t + 1), pmax = value_of(t + 2), twice = value_of(t + 3);
    double pdsum = (double)value_of(t + 4) * 1.0e-3;
    for (int o = 16; o > 0; o /= 2) {
        float other_sum = __shfl_xor_sync(0xffffffffu, psum, o);
        psum += other_sum;
        float other_max = __shfl_xor_sync(0xffffffffu, pmax, o);
        pmax = fmaxf(pmax, other_max);
        double other_dsum = __shfl_xor_sync(0xffffffffu, pdsum, o);
        pdsum += other_dsum;
    }
    for (int o = 16; o > 0; o /= 2) {
        float other = __shfl_xor_sync(0xffffffffu, twice, o);
        twice += other;
        other = __shfl_xor_sync(0xffffffffu, twice, o);
        twice += other;
    }
    out[t] = Results{sum, dsum, bits, max, psum, pmax, pdsum, twice};
}

static void compare(int blocks, int threads, int skip) {
    const int n = blocks * threads;
    Results *d_fused, *d_reference;
    CUDA_CHECK(cudaMalloc(&d_fused, n * sizeof(Results)));
    CUDA_CHECK(cudaMalloc(&d_reference, n * sizeof(Results)));
    CUDA_CHECK(cudaMemset(d_fused, 0, n * sizeof(Results)));
    CUDA_CHECK(cudaMemset(d_reference, 0, n * sizeof(Results)));
    fused<<<blocks, threads>>>(d_fused, skip);
    reference<<<blocks, threads>>>(d_reference, skip);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<Results> f(n), r(n);
    CUDA_CHECK(cudaMemcpy(f.data(), d_fused, n * sizeof(Results), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(r.data(), d_reference, n * sizeof(Results), cudaMemcpyDeviceToHost));
    int differ[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int t = 0; t < n; t++) {
        differ[0] += memcmp(&f[t].sum, &r[t].sum, sizeof(float)) != 0;
        differ[1] += memcmp(&f[t].dsum, &r[t].dsum, sizeof(double)) != 0;
        differ[2] += f[t].bits != r[t].bits;
        differ[3] += memcmp(&f[t].max, &r[t].max, sizeof(float)) != 0;
        differ[4] += memcmp(&f[t].psum, &r[t].psum, sizeof(float)) != 0;
        differ[5] += memcmp(&f[t].pmax, &r[t].pmax, sizeof(float)) != 0;
        differ[6] += memcmp(&f[t].pdsum, &r[t].pdsum, sizeof(double)) != 0;
        differ[7] += memcmp(&f[t].twice, &r[t].twice, sizeof(float)) != 0;
    }
    // The sums must depend on the order, or the comparison could not tell orders apart.
    float forward = 0.0f, backward = 0.0f;
    for (int l = 0; l < 32; l++) forward += value_of(l);
    for (int l = 31; l >= 0; l--) backward += value_of(l);
    const char* names[8] = {"float +=",
                            "double +=",
                            "unsigned ^=",
                            "fmaxf",
                            "side by side: +=",
                            "side by side: fmaxf",
                            "side by side: double +=",
                            "one variable folded twice"};
    for (int k = 0; k < 8; k++) {
        char what[160];
        snprintf(what, sizeof what,
                 "%s: %d blocks of %d threads%s: fused equals the five shuffles bit for bit",
                 names[k], blocks, threads, skip ? ", lanes 3, 8, 13, ... returned first" : "");
        expect(
            differ[k] == 0, what,
            std::to_string(differ[k]) + " of " + std::to_string(n) + " threads differ (bound 0)");
    }
    expect(forward != backward, "the test values' float sum depends on the order",
           std::to_string(forward) + " vs " + std::to_string(backward));
    CUDA_CHECK(cudaFree(d_fused));
    CUDA_CHECK(cudaFree(d_reference));
}

int main() {
    compare(4, 256, 0);
    compare(3, 48, 0);
    compare(2, 64, 1);
    compare(3, 48, 1);
    return test_report("warp butterfly");
}
