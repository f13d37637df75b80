// column_finish.h: the trainer's column_finish_kernel (train_gpt.cu), in float, for the tests
// of thread loops at barriers (cucc_barrier_fission.cu, cucc_barrier_fission_speed.cu): a copy,
// so that they build in a second rather than with the whole trainer. 8 warps of a block sum chunks
// w, w + 8, ... of 32 columns, warp 0 adds the warps' sums: one barrier at the top level, and the
// other warps return after it.
#pragma once

constexpr int kWarps = 8;

__global__ void column_finish_kernel(float* dweight, float* dbias, const float* partials,
                                     int n_chunks, int C) {
    __shared__ float warp_sums[2][kWarps][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 32 + lane;
    float sum_dx = 0.0f, sum_d = 0.0f;
    for (int chunk = warp; c < C && chunk < n_chunks; chunk += kWarps) {
        if (dweight) sum_dx += partials[((size_t)chunk * 2 + 0) * C + c];
        sum_d += partials[((size_t)chunk * 2 + 1) * C + c];
    }
    warp_sums[0][warp][lane] = sum_dx;
    warp_sums[1][warp][lane] = sum_d;
    __syncthreads();  // every warp's sums are in shared memory
    if (warp != 0 || c >= C) return;
    for (int w = 1; w < kWarps; w++) {
        sum_dx += warp_sums[0][w][lane];
        sum_d += warp_sums[1][w][lane];
    }
    if (dweight) dweight[c] += sum_dx;
    if (dbias) dbias[c] += sum_d;
}
